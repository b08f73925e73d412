// Whether a Service's cloud LB keeps the client address, per provider docs: only a preserving LB can loop pod traffic.
// Proxied or PROXY-protocol LBs open their own connection; annotations.ts keeps only LB_CLIENT_ADDRESS_KEYS.

export type ClientAddressKind = 'proxied' | 'proxy-protocol' | 'preserved' | 'unknown';

export interface LbClientAddress {
  kind: ClientAddressKind;
  /** The provider, when the annotations name one ('AWS', 'Hetzner', ...). */
  provider?: string;
  /** Why: the annotations (verbatim) and the documented default they imply. */
  evidence: string[];
}

const AWS = 'service.beta.kubernetes.io/aws-load-balancer-';
const AWS_TYPE = `${AWS}type`;
const AWS_NLB_TARGET_TYPE = `${AWS}nlb-target-type`;
export const AWS_TG_ATTRIBUTES = `${AWS}target-group-attributes`;
const AWS_PROXY_PROTOCOL = `${AWS}proxy-protocol`;
const AWS_LB_CLASS = 'service.k8s.aws/nlb';
const HETZNER_PROXY_PROTOCOL = 'load-balancer.hetzner.cloud/uses-proxyprotocol';
const HETZNER_LOCATION = 'load-balancer.hetzner.cloud/location';
const HETZNER_NAME = 'load-balancer.hetzner.cloud/name';
const OPENSTACK_PROXY_PROTOCOL = 'loadbalancer.openstack.org/proxy-protocol';
const DO_PROXY_PROTOCOL = 'service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol';
const OCI_LB_TYPE = 'oci.oraclecloud.com/load-balancer-type';
const OCI_PRESERVE_SOURCE = 'oci-network-load-balancer.oraclecloud.com/is-preserve-source';

export const LB_CLIENT_ADDRESS_KEYS = [
  AWS_TYPE,
  AWS_NLB_TARGET_TYPE,
  AWS_TG_ATTRIBUTES,
  AWS_PROXY_PROTOCOL,
  HETZNER_PROXY_PROTOCOL,
  HETZNER_LOCATION,
  HETZNER_NAME,
  OPENSTACK_PROXY_PROTOCOL,
  DO_PROXY_PROTOCOL,
  OCI_LB_TYPE,
  OCI_PRESERVE_SOURCE,
];

const quote = (raw: Record<string, string>, k: string): string => `${k}: "${raw[k]}"`;
const isTrue = (v: string | undefined): boolean => v?.trim().toLowerCase() === 'true';

/** `preserve_client_ip.enabled=true|false` inside the target-group attributes list, if set. */
function preserveAttr(raw: Record<string, string>): boolean | undefined {
  const m = /(?:^|,)\s*preserve_client_ip\.enabled\s*=\s*(true|false)\s*(?:,|$)/i.exec(raw[AWS_TG_ATTRIBUTES] ?? '');
  return m ? m[1]!.toLowerCase() === 'true' : undefined;
}

function aws(raw: Record<string, string>, lbClass: string | undefined, protocol: string): LbClientAddress | undefined {
  const type = raw[AWS_TYPE]?.toLowerCase();
  const target = raw[AWS_NLB_TARGET_TYPE]?.toLowerCase();
  const viaController = lbClass === AWS_LB_CLASS || type === 'external' || type === 'nlb-ip';
  if (
    !viaController &&
    type !== 'nlb' &&
    target === undefined &&
    raw[AWS_PROXY_PROTOCOL] === undefined &&
    raw[AWS_TG_ATTRIBUTES] === undefined
  ) {
    return undefined;
  }
  const provider = 'AWS';
  const ev = [AWS_TYPE, AWS_NLB_TARGET_TYPE, AWS_TG_ATTRIBUTES, AWS_PROXY_PROTOCOL]
    .filter((k) => raw[k] !== undefined)
    .map((k) => quote(raw, k));
  if (lbClass) ev.push(`spec.loadBalancerClass: ${lbClass}`);
  if (raw[AWS_PROXY_PROTOCOL] === '*')
    return {
      kind: 'proxy-protocol',
      provider,
      evidence: [...ev, 'the NLB sends a PROXY protocol v2 header to the targets'],
    };
  const preserve = preserveAttr(raw);
  if (preserve === false)
    return {
      kind: 'proxied',
      provider,
      evidence: [...ev, 'client IP preservation off: the NLB connects to targets from its own private address'],
    };
  if (preserve === true)
    return {
      kind: 'preserved',
      provider,
      evidence: [...ev, 'client IP preservation on: targets see the client address'],
    };
  // Documented defaults: instance targets preserve the client IP; IP targets do for UDP only.
  const ipTargets = target === 'ip' || type === 'nlb-ip';
  if (ipTargets && protocol !== 'UDP') {
    return {
      kind: 'proxied',
      provider,
      evidence: [
        ...ev,
        'IP targets over TCP: client IP preservation is off by default (the NLB connects from its own address)',
      ],
    };
  }
  if (ipTargets)
    return { kind: 'preserved', provider, evidence: [...ev, 'IP targets over UDP: the client IP is always preserved'] };
  if (type === 'nlb' || viaController || target === 'instance') {
    return {
      kind: 'preserved',
      provider,
      evidence: [...ev, 'instance targets: the NLB preserves the client IP by default'],
    };
  }
  return { kind: 'unknown', provider, evidence: ev };
}

/** What the annotations say about the LB's handling of client addresses (raw: the kept annotations). */
export function lbClientAddress(
  raw: Record<string, string>,
  lbClass: string | undefined,
  protocol: string,
): LbClientAddress {
  const a = aws(raw, lbClass, protocol);
  if (a) return a;
  if (
    raw[HETZNER_PROXY_PROTOCOL] !== undefined ||
    raw[HETZNER_LOCATION] !== undefined ||
    raw[HETZNER_NAME] !== undefined
  ) {
    const ev = [HETZNER_PROXY_PROTOCOL, HETZNER_LOCATION, HETZNER_NAME]
      .filter((k) => raw[k] !== undefined)
      .map((k) => quote(raw, k));
    return isTrue(raw[HETZNER_PROXY_PROTOCOL])
      ? { kind: 'proxy-protocol', provider: 'Hetzner', evidence: [...ev, 'the LB sends a PROXY protocol header'] }
      : {
          kind: 'proxied',
          provider: 'Hetzner',
          evidence: [...ev, 'Hetzner LBs proxy TCP: targets see the LB’s address'],
        };
  }
  if (isTrue(raw[OPENSTACK_PROXY_PROTOCOL])) {
    return {
      kind: 'proxy-protocol',
      provider: 'OpenStack',
      evidence: [quote(raw, OPENSTACK_PROXY_PROTOCOL), 'Octavia sends a PROXY protocol header'],
    };
  }
  if (raw[DO_PROXY_PROTOCOL] !== undefined) {
    return isTrue(raw[DO_PROXY_PROTOCOL])
      ? {
          kind: 'proxy-protocol',
          provider: 'DigitalOcean',
          evidence: [quote(raw, DO_PROXY_PROTOCOL), 'the LB sends a PROXY protocol header'],
        }
      : {
          kind: 'proxied',
          provider: 'DigitalOcean',
          evidence: [quote(raw, DO_PROXY_PROTOCOL), 'DigitalOcean LBs proxy: targets see the LB’s address'],
        };
  }
  const oci = raw[OCI_LB_TYPE]?.toLowerCase();
  if (oci === 'lb')
    return {
      kind: 'proxied',
      provider: 'OCI',
      evidence: [quote(raw, OCI_LB_TYPE), 'the OCI load balancer proxies: backends see its address'],
    };
  if (oci === 'nlb') {
    const p = raw[OCI_PRESERVE_SOURCE];
    const ev = [quote(raw, OCI_LB_TYPE), ...(p !== undefined ? [quote(raw, OCI_PRESERVE_SOURCE)] : [])];
    if (p === undefined) return { kind: 'unknown', provider: 'OCI', evidence: ev };
    return isTrue(p)
      ? { kind: 'preserved', provider: 'OCI', evidence: [...ev, 'the network LB preserves the client address'] }
      : {
          kind: 'proxied',
          provider: 'OCI',
          evidence: [...ev, 'the network LB rewrites the source to its own address'],
        };
  }
  return { kind: 'unknown', evidence: [] };
}

/** Whether the LB's own connection to the backend carries a source that is not the client's. */
export const rewritesSource = (c: LbClientAddress): boolean => c.kind === 'proxied' || c.kind === 'proxy-protocol';
