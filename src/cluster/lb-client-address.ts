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

const isTrue = (v: string | undefined): boolean => v?.trim().toLowerCase() === 'true';

/** The annotations of `keys` that are set, quoted verbatim. */
const quoted = (raw: Record<string, string>, keys: string[]): string[] =>
  keys.filter((k) => raw[k] !== undefined).map((k) => `${k}: "${raw[k]}"`);

const verdict = (kind: ClientAddressKind, provider: string, evidence: string[], why: string): LbClientAddress => ({
  kind,
  provider,
  evidence: [...evidence, why],
});

/** `preserve_client_ip.enabled=true|false` inside the target-group attributes list, if set. */
function preserveAttr(raw: Record<string, string>): boolean | undefined {
  const m = /(?:^|,)\s*preserve_client_ip\.enabled\s*=\s*(true|false)\s*(?:,|$)/i.exec(raw[AWS_TG_ATTRIBUTES] ?? '');
  return m ? m[1]!.toLowerCase() === 'true' : undefined;
}

function aws(raw: Record<string, string>, lbClass: string | undefined, protocol: string): LbClientAddress | undefined {
  const type = raw[AWS_TYPE]?.toLowerCase();
  const target = raw[AWS_NLB_TARGET_TYPE]?.toLowerCase();
  const viaController = lbClass === AWS_LB_CLASS || type === 'external' || type === 'nlb-ip';
  const tuned = raw[AWS_PROXY_PROTOCOL] !== undefined || raw[AWS_TG_ATTRIBUTES] !== undefined;
  if (!viaController && type !== 'nlb' && target === undefined && !tuned) return undefined;
  const ev = quoted(raw, [AWS_TYPE, AWS_NLB_TARGET_TYPE, AWS_TG_ATTRIBUTES, AWS_PROXY_PROTOCOL]);
  if (lbClass) ev.push(`spec.loadBalancerClass: ${lbClass}`);
  if (raw[AWS_PROXY_PROTOCOL] === '*')
    return verdict('proxy-protocol', 'AWS', ev, 'the NLB sends a PROXY protocol v2 header to the targets');
  const preserve = preserveAttr(raw);
  if (preserve === false)
    return verdict(
      'proxied',
      'AWS',
      ev,
      'client IP preservation off: the NLB connects to targets from its own private address',
    );
  if (preserve === true)
    return verdict('preserved', 'AWS', ev, 'client IP preservation on: targets see the client address');
  // Documented defaults: instance targets preserve the client IP; IP targets do for UDP only.
  const ipTargets = target === 'ip' || type === 'nlb-ip';
  if (ipTargets && protocol !== 'UDP')
    return verdict(
      'proxied',
      'AWS',
      ev,
      'IP targets over TCP: client IP preservation is off by default (the NLB connects from its own address)',
    );
  if (ipTargets) return verdict('preserved', 'AWS', ev, 'IP targets over UDP: the client IP is always preserved');
  if (type === 'nlb' || viaController || target === 'instance')
    return verdict('preserved', 'AWS', ev, 'instance targets: the NLB preserves the client IP by default');
  return { kind: 'unknown', provider: 'AWS', evidence: ev };
}

/** What the annotations say about the LB's handling of client addresses (raw: the kept annotations). */
export function lbClientAddress(
  raw: Record<string, string>,
  lbClass: string | undefined,
  protocol: string,
): LbClientAddress {
  const a = aws(raw, lbClass, protocol);
  if (a) return a;
  const hetzner = quoted(raw, [HETZNER_PROXY_PROTOCOL, HETZNER_LOCATION, HETZNER_NAME]);
  if (hetzner.length > 0)
    return isTrue(raw[HETZNER_PROXY_PROTOCOL])
      ? verdict('proxy-protocol', 'Hetzner', hetzner, 'the LB sends a PROXY protocol header')
      : verdict('proxied', 'Hetzner', hetzner, 'Hetzner LBs proxy TCP: targets see the LB’s address');
  if (isTrue(raw[OPENSTACK_PROXY_PROTOCOL]))
    return verdict(
      'proxy-protocol',
      'OpenStack',
      quoted(raw, [OPENSTACK_PROXY_PROTOCOL]),
      'Octavia sends a PROXY protocol header',
    );
  if (raw[DO_PROXY_PROTOCOL] !== undefined)
    return isTrue(raw[DO_PROXY_PROTOCOL])
      ? verdict(
          'proxy-protocol',
          'DigitalOcean',
          quoted(raw, [DO_PROXY_PROTOCOL]),
          'the LB sends a PROXY protocol header',
        )
      : verdict(
          'proxied',
          'DigitalOcean',
          quoted(raw, [DO_PROXY_PROTOCOL]),
          'DigitalOcean LBs proxy: targets see the LB’s address',
        );
  const oci = raw[OCI_LB_TYPE]?.toLowerCase();
  const ociEvidence = quoted(raw, [OCI_LB_TYPE, OCI_PRESERVE_SOURCE]);
  if (oci === 'lb')
    return verdict(
      'proxied',
      'OCI',
      quoted(raw, [OCI_LB_TYPE]),
      'the OCI load balancer proxies: backends see its address',
    );
  if (oci === 'nlb') {
    const preserve = raw[OCI_PRESERVE_SOURCE];
    if (preserve === undefined) return { kind: 'unknown', provider: 'OCI', evidence: ociEvidence };
    return isTrue(preserve)
      ? verdict('preserved', 'OCI', ociEvidence, 'the network LB preserves the client address')
      : verdict('proxied', 'OCI', ociEvidence, 'the network LB rewrites the source to its own address');
  }
  return { kind: 'unknown', evidence: [] };
}

/** Whether the LB's own connection to the backend carries a source that is not the client's. */
export const rewritesSource = (c: LbClientAddress): boolean => c.kind === 'proxied' || c.kind === 'proxy-protocol';
