// Lines for the `snapshot` text output: which backend, how many kube-proxy chains of each kind, the LB-related
// rules and ipsets, and per LB VIP what happens to pod traffic.

import type { IptablesDump, NatSnapshot } from '../kernel/nat/types.js';
import type { NftSnapshot } from '../kernel/nft/types.js';
import { kubeNatFacts } from './facts.js';

const KINDS = ['SVC', 'SEP', 'EXT', 'SVL', 'FW', 'XLB'] as const;
const LAYOUT_NAMES = {
  'v1.31': 'v1.31 layout, priority -110, kubernetes#131765',
  'v1.34': 'v1.34 layout, kubernetes#132456',
  other: 'unrecognised layout',
};

export function formatNatSummary(nat: NatSnapshot, nft?: NftSnapshot): string[] {
  const out = [`backend: ${nat.backend} (${nat.backendChoice.reason})`];
  for (const dump of [nat.v4, nat.v6]) if (dump) out.push(dumpLine(dump));
  if (nat.ipsets) {
    const kube = nat.ipsets.sets.filter((s) => s.name.startsWith('KUBE-'));
    const lb = kube.filter((s) => s.name.includes('LOAD-BALANCER') && s.members.length > 0);
    out.push(
      `ipsets: ${nat.ipsets.sets.length} sets (${kube.length} KUBE-*)` +
        (lb.length ? `; LB sets: ${lb.map((s) => `${s.name} ${s.members.length}`).join(', ')}` : ''),
    );
  }
  for (const t of nft?.tables ?? []) {
    const maps = t.sets
      .filter((x) => x.kind === 'map' && x.elements.length > 0)
      .map((x) => `${x.name} ${x.elements.length}`);
    out.push(
      `nftables: table ${t.family} ${t.name}: ${t.chains.length} chains, ` +
        `${t.rules.length} rules${maps.length ? `; maps: ${maps.join(', ')}` : ''}`,
    );
  }
  const facts = kubeNatFacts(nat, nft);
  const layouts = Object.values(facts.nftLayouts ?? {});
  const layoutNames = [...new Set(layouts)].map((l) => LAYOUT_NAMES[l]);
  const gen = facts.iptablesGeneration
    ? ` (${facts.iptablesGeneration} chain names)`
    : layouts.length
      ? ` (filter chains: ${layoutNames.join('; ')})`
      : '';
  out.push(`kube-proxy: ${facts.mode === 'none' ? 'no kube-proxy rules found' : `${facts.mode} mode${gen}`}`);
  for (const lb of facts.loadBalancers) {
    const host = lb.family === 6 ? `[${lb.vip}]` : lb.vip;
    const policy = lb.trafficPolicy ? ` ETP=${lb.trafficPolicy},` : '';
    const pod = { masquerade: 'masqueraded', exempt: 'NOT masqueraded', unknown: 'masquerade unknown' }[lb.podTraffic];
    const what = lb.sourceRangeDrop?.certain
      ? 'pod traffic dropped by loadBalancerSourceRanges'
      : `pod traffic ${pod}, ${lb.capture}${lb.sourceRangeDrop ? ' (loadBalancerSourceRanges may drop it)' : ''}`;
    const noLocal = lb.noEndpoints?.verdict === 'drop' ? ', no local endpoints (external traffic dropped)' : '';
    out.push(
      `  ${lb.lbOrExternal ? 'LB/external IP' : 'LB'} ${host}:${lb.port}/` +
        `${lb.protocol}${lb.service ? ` ${lb.service}` : ''}:${policy} ${what}${noLocal}`,
    );
  }
  if (facts.nodePorts.length) {
    const local = facts.nodePorts.filter((n) => n.trafficPolicy === 'Local').length;
    out.push(`  NodePorts: ${facts.nodePorts.length} (${local} with ETP=Local)`);
  }
  const warnings = [nat, nat.v4, nat.v6, nat.ipsets, nft].flatMap((x) => x?.warnings ?? []);
  for (const w of warnings.slice(0, 5)) out.push(`warning: ${w}`);
  if (warnings.length > 5) out.push(`warning: ... and ${warnings.length - 5} more`);
  return out;
}

function dumpLine(dump: IptablesDump): string {
  const nat = dump.tables.find((t) => t.name === 'nat');
  const family = dump.family === 6 ? 'IPv6' : 'IPv4';
  if (!nat) return `${family}: ${dump.tables.length} tables, no nat table`;
  const counts = KINDS.map((k) => [k, nat.chains.filter((c) => c.name.startsWith(`KUBE-${k}-`)).length] as const)
    .filter(([, n]) => n > 0)
    .map(([k, n]) => `${k} ${n}`);
  const lbRules = nat.rules.filter(
    (r) => r.comment?.endsWith(' loadbalancer IP') || r.spec.includes('KUBE-LOAD-BALANCER'),
  ).length;
  const kube = nat.chains.filter((c) => c.name.startsWith('KUBE-')).length;
  return (
    `${family}: ${dump.tables.length} tables; nat ${nat.chains.length} chains ` +
    `(${kube} KUBE-*${counts.length ? `: ${counts.join(', ')}` : ''}), ` +
    `${nat.rules.length} rules, ${lbRules} LB rules`
  );
}
