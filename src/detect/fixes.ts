// Fixes that change a Kubernetes object, as data with their client-facing cost and kubectl command, made where
// printed; clbprobe only prints them, applying one is the owner's decision.

import { TENCENT_PREVENT_LOOPBACK } from '../cluster/annotations.js';
import { AWS_TG_ATTRIBUTES } from '../cluster/lb-client-address.js';
import type { ServiceView } from '../cluster/types.js';
import type { DetectContext } from './context.js';
import type { FindingOf, FixChange, FixCommand, FixKind, FixPatch } from './core-types.js';
import { isAws } from './remedies.js';

export type { FixChange, FixCommand, FixKind } from './core-types.js';

/** POSIX shell quoting: bare when only safe characters, else single quotes. */
export function shellQuote(s: string): string {
  return /^[A-Za-z0-9._/:=@%+,-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** `kubectl -n NS patch service NAME --type T -p 'PATCH'`, shell-quoted. */
export function fixCommand({ object, patch }: Pick<FixChange, 'object' | 'patch'>): string {
  const target = ['kubectl', '-n', object.namespace, 'patch', 'service', object.name];
  return [...target, '--type', patch.type, '-p', JSON.stringify(patch.body)].map(shellQuote).join(' ');
}

export function withCommand(change: FixChange): FixCommand {
  return { ...change, command: fixCommand(change) };
}

/** The finding as the outputs show it: each fix with its command. */
export function withFixCommands<F extends FindingOf<string>>(f: F): F {
  return f.fixes ? { ...f, fixes: f.fixes.map(withCommand) } : f;
}

/** The one change a fix makes to the Service, as the list the fixes return. */
function change(service: ServiceView, kind: FixKind, patch: FixPatch, effect: string): FixChange[] {
  const object = {
    apiVersion: 'v1' as const,
    kind: 'Service' as const,
    namespace: service.namespace,
    name: service.name,
  };
  return [{ kind, object, patch, effect }];
}

/** ETP=Local → Cluster: kube-proxy then SNATs pod→LB traffic to the node IP. */
export function etpCluster(service: ServiceView): FixChange[] {
  if (service.externalTrafficPolicy !== 'Local') return [];
  return change(
    service,
    'etp-cluster',
    { type: 'merge', body: { spec: { externalTrafficPolicy: 'Cluster' } } },
    'backends no longer see the client source IP (kube-proxy SNATs to a node ' +
      'IP), and outside traffic may take a second hop to a node with a backend',
  );
}

const TENCENT_PREFIXES = ['service.cloud.tencent.com/', 'service.kubernetes.io/qcloud-', 'service.kubernetes.io/tke-'];

/** TKE's prevent-loopback annotation on a Tencent Service (one with a Tencent annotation), unless already "true". */
export function tencentPreventLoopback(service: ServiceView): FixChange[] {
  const tencent = Object.keys(service.annotations.raw).some((k) => TENCENT_PREFIXES.some((p) => k.startsWith(p)));
  if (!tencent || service.annotations.tencentPreventLoopback === true) return [];
  return change(
    service,
    'tencent-prevent-loopback',
    { type: 'merge', body: { metadata: { annotations: { [TENCENT_PREVENT_LOOPBACK]: 'true' } } } },
    'TKE only: kube-proxy binds the CLB VIP on every node, so in-cluster ' +
      'clients reach the backends without the CLB (no CLB access logs, ACLs or ' +
      'persistence for them), and the CLB health checks come from 100.64.0.0/10',
  );
}

/** AWS NLB preserve_client_ip.enabled=false, keeping the other listed attributes (a merge patch replaces the value). */
export function awsPreserveClientIpOff(service: ServiceView): FixChange[] {
  if (!isAws(service)) return [];
  const attrs = (service.annotations.raw[AWS_TG_ATTRIBUTES] ?? '')
    .split(',')
    .map((a) => a.trim())
    .filter((a) => a !== '');
  if (attrs.some((a) => a.replace(/\s+/g, '') === 'preserve_client_ip.enabled=false')) return [];
  const value = [
    ...attrs.filter((a) => !a.startsWith('preserve_client_ip.enabled')),
    'preserve_client_ip.enabled=false',
  ].join(',');
  return change(
    service,
    'aws-preserve-client-ip-off',
    { type: 'merge', body: { metadata: { annotations: { [AWS_TG_ATTRIBUTES]: value } } } },
    'backends see the NLB’s private address instead of the client IP (add proxy-protocol ' +
      'to keep it); needs the AWS Load Balancer Controller, the in-tree controller ignores it',
  );
}

/** Appends this node's pod CIDRs to loadBalancerSourceRanges by JSON patch, as the view lacks the existing ranges. */
export function sourceRangesAddPods(service: ServiceView, ctx: DetectContext): FixChange[] {
  const pods = ctx.input.local.podCidrs;
  if (pods.length === 0) return [];
  return change(
    service,
    'source-ranges-add-pods',
    {
      type: 'json',
      body: pods.map((cidr) => ({ op: 'add', path: '/spec/loadBalancerSourceRanges/-', value: cidr })),
    },
    `the LB and kube-proxy admit connections from ${pods.join(', ')} ` +
      `(this node's pods); every other node's pod CIDR needs the same`,
  );
}
