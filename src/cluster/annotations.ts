// Cloud-provider Service annotations that decide whether loopback can happen (TKE, ACK/`alicloud-`, AWS, Azure, GCP).
import { BlockList } from 'node:net';
import { LB_CLIENT_ADDRESS_KEYS } from './lb-client-address.js';
import { Interned } from './objects.js';
import type { LbIngressIp, LoopbackAnnotations } from './types.js';

export const TENCENT_PREVENT_LOOPBACK = 'service.cloud.tencent.com/prevent-loopback';
const TENCENT_INTERNAL_SUBNET = 'service.kubernetes.io/qcloud-loadbalancer-internal-subnetid';
const TENCENT_EXISTING_LB = 'service.kubernetes.io/tke-existed-lbid';

const ALIBABA_PREFIXES = ['service.beta.kubernetes.io/alibaba-cloud-', 'service.beta.kubernetes.io/alicloud-'];
const alibaba = (suffix: string): string[] => ALIBABA_PREFIXES.map((p) => p + suffix);
const ALIBABA_HOSTNAME = alibaba('loadbalancer-hostname');
const ALIBABA_ADDRESS_TYPE = alibaba('loadbalancer-address-type');
const ALIBABA_EXISTING_LB = alibaba('loadbalancer-id');

const AWS_INTERNAL = 'service.beta.kubernetes.io/aws-load-balancer-internal';
const AWS_SCHEME = 'service.beta.kubernetes.io/aws-load-balancer-scheme';
const AZURE_INTERNAL = 'service.beta.kubernetes.io/azure-load-balancer-internal';
const GCP_LB_TYPE = ['networking.gke.io/load-balancer-type', 'cloud.google.com/load-balancer-type'];

/** Annotation key → does this value declare an internal LB? In precedence order. */
const INTERNAL_RULES: [string, (v: string) => boolean][] = [
  [TENCENT_INTERNAL_SUBNET, (v) => v.trim() !== ''],
  ...ALIBABA_ADDRESS_TYPE.map((k): [string, (v: string) => boolean] => [k, (v) => v === 'intranet']),
  [AWS_INTERNAL, (v) => v.trim().toLowerCase() !== 'false'],
  [AWS_SCHEME, (v) => v === 'internal'],
  [AZURE_INTERNAL, (v) => v.trim().toLowerCase() === 'true'],
  ...GCP_LB_TYPE.map((k): [string, (v: string) => boolean] => [k, (v) => v.toLowerCase() === 'internal']),
];

const EXISTING_LB_KEYS = [TENCENT_EXISTING_LB, ...ALIBABA_EXISTING_LB];

const KNOWN_KEYS = new Set<string>([
  TENCENT_PREVENT_LOOPBACK,
  ...ALIBABA_HOSTNAME,
  ...INTERNAL_RULES.map(([k]) => k),
  ...EXISTING_LB_KEYS,
  // How the LB treats client addresses (lb-client-address.ts), and AWS's pod targets (detect/path.ts).
  ...LB_CLIENT_ADDRESS_KEYS,
]);

/** For the many Services with none of these annotations. Frozen: views share it. */
const NO_ANNOTATIONS: LoopbackAnnotations = deepFreeze(interpretKnown({}));

/** Interpretations shared per annotation text, since Services carry few distinct sets; emptied when full. */
const interned = new Interned<LoopbackAnnotations>(1024);

export function interpretAnnotations(annotations: Record<string, string>): LoopbackAnnotations {
  const known = Object.entries(annotations).filter(([k]) => KNOWN_KEYS.has(k));
  if (known.length === 0) return NO_ANNOTATIONS;
  const kept = Object.fromEntries(known);
  return interned.get(JSON.stringify(kept), () => deepFreeze(interpretKnown(kept)));
}

/** The interpretation of the known annotations alone (every rule reads only KNOWN_KEYS). */
function interpretKnown(raw: Record<string, string>): LoopbackAnnotations {
  const prevent = raw[TENCENT_PREVENT_LOOPBACK];
  const hostname = ALIBABA_HOSTNAME.map((k) => raw[k]).find((v) => v !== undefined && v !== '');
  const internal = INTERNAL_RULES.find(([key, isInternal]) => raw[key] !== undefined && isInternal(raw[key]));
  const existingKey = EXISTING_LB_KEYS.find((k) => (raw[k] ?? '') !== '');
  // One literal with every field: one object shape for all.
  return {
    tencentPreventLoopback: prevent === undefined ? undefined : prevent.trim().toLowerCase() === 'true',
    alibabaHostname: hostname,
    internalByAnnotation: internal ? { key: internal[0], value: raw[internal[0]]! } : undefined,
    existingLb: existingKey !== undefined ? { key: existingKey, value: raw[existingKey]! } : undefined,
    raw,
  };
}

function deepFreeze(a: LoopbackAnnotations): LoopbackAnnotations {
  for (const part of [a.raw, a.internalByAnnotation, a.existingLb]) Object.freeze(part);
  return Object.freeze(a);
}

// VPC space: RFC 1918, RFC 6598 100.64/10 (Tencent/Alibaba VPCs and Tencent health checks), IPv6 ULA.
const PRIVATE = new BlockList();
PRIVATE.addSubnet('10.0.0.0', 8, 'ipv4');
PRIVATE.addSubnet('172.16.0.0', 12, 'ipv4');
PRIVATE.addSubnet('192.168.0.0', 16, 'ipv4');
PRIVATE.addSubnet('100.64.0.0', 10, 'ipv4');
PRIVATE.addSubnet('fc00::', 7, 'ipv6');

/** An internal LB: declared by an annotation, or every LB address is one only a VPC routes. */
export function isInternalLb(annotations: LoopbackAnnotations, lbIngress: readonly LbIngressIp[]): boolean {
  return (
    annotations.internalByAnnotation !== undefined ||
    (lbIngress.length > 0 && lbIngress.every((e) => isPrivateIp(e.ip)))
  );
}

/** True for an address that only a VPC can route (an internal LB's VIP). Expects a valid IP. */
export function isPrivateIp(ip: string): boolean {
  return PRIVATE.check(ip, ip.includes(':') ? 'ipv6' : 'ipv4');
}
