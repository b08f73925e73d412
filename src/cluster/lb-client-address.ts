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

/** A verdict of `provider`, whose evidence is the annotations of `keys` that are set, quoted verbatim, then `why`. */
function verdicts(provider: string, raw: Record<string, string>, keys: string[], more: string[] = []) {
  const evidence = [...keys.filter((k) => raw[k] !== undefined).map((k) => `${k}: "${raw[k]}"`), ...more];
  return (kind: ClientAddressKind, why?: string): LbClientAddress => ({
    kind,
    provider,
    evidence: why === undefined ? evidence : [...evidence, why],
  });
}

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
  const keys = [AWS_TYPE, AWS_NLB_TARGET_TYPE, AWS_TG_ATTRIBUTES, AWS_PROXY_PROTOCOL];
  const say = verdicts('AWS', raw, keys, lbClass ? [`spec.loadBalancerClass: ${lbClass}`] : []);
  if (raw[AWS_PROXY_PROTOCOL] === '*')
    return say('proxy-protocol', 'the NLB sends a PROXY protocol v2 header to the targets');
  const preserve = preserveAttr(raw);
  if (preserve === false)
    return say('proxied', 'client IP preservation off: the NLB connects to targets from its own private address');
  if (preserve === true) return say('preserved', 'client IP preservation on: targets see the client address');
  // Documented defaults: instance targets preserve the client IP; IP targets do for UDP only.
  const ipTargets = target === 'ip' || type === 'nlb-ip';
  if (ipTargets && protocol !== 'UDP')
    return say(
      'proxied',
      'IP targets over TCP: client IP preservation is off by default (the NLB connects from its own address)',
    );
  if (ipTargets) return say('preserved', 'IP targets over UDP: the client IP is always preserved');
  if (type === 'nlb' || viaController || target === 'instance')
    return say('preserved', 'instance targets: the NLB preserves the client IP by default');
  return say('unknown');
}

/** What the annotations say about the LB's handling of client addresses (raw: the kept annotations). */
export function lbClientAddress(
  raw: Record<string, string>,
  lbClass: string | undefined,
  protocol: string,
): LbClientAddress {
  const fromAws = aws(raw, lbClass, protocol);
  if (fromAws) return fromAws;
  const hetzner = [HETZNER_PROXY_PROTOCOL, HETZNER_LOCATION, HETZNER_NAME];
  if (hetzner.some((k) => raw[k] !== undefined)) {
    const say = verdicts('Hetzner', raw, hetzner);
    return isTrue(raw[HETZNER_PROXY_PROTOCOL])
      ? say('proxy-protocol', 'the LB sends a PROXY protocol header')
      : say('proxied', 'Hetzner LBs proxy TCP: targets see the LB’s address');
  }
  if (isTrue(raw[OPENSTACK_PROXY_PROTOCOL]))
    return verdicts('OpenStack', raw, [OPENSTACK_PROXY_PROTOCOL])(
      'proxy-protocol',
      'Octavia sends a PROXY protocol header',
    );
  if (raw[DO_PROXY_PROTOCOL] !== undefined) {
    const say = verdicts('DigitalOcean', raw, [DO_PROXY_PROTOCOL]);
    return isTrue(raw[DO_PROXY_PROTOCOL])
      ? say('proxy-protocol', 'the LB sends a PROXY protocol header')
      : say('proxied', 'DigitalOcean LBs proxy: targets see the LB’s address');
  }
  const oci = raw[OCI_LB_TYPE]?.toLowerCase();
  if (oci === 'lb')
    return verdicts('OCI', raw, [OCI_LB_TYPE])('proxied', 'the OCI load balancer proxies: backends see its address');
  if (oci === 'nlb') {
    const say = verdicts('OCI', raw, [OCI_LB_TYPE, OCI_PRESERVE_SOURCE]);
    const preserve = raw[OCI_PRESERVE_SOURCE];
    if (preserve === undefined) return say('unknown');
    return isTrue(preserve)
      ? say('preserved', 'the network LB preserves the client address')
      : say('proxied', 'the network LB rewrites the source to its own address');
  }
  return { kind: 'unknown', evidence: [] };
}

/** Whether the LB's own connection to the backend carries a source that is not the client's. */
export const rewritesSource = (c: LbClientAddress): boolean => c.kind === 'proxied' || c.kind === 'proxy-protocol';
