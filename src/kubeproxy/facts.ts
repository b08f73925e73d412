// What kube-proxy's NAT rules say about LoadBalancer traffic on this node: the proxy mode and, per LB VIP:port,
// whether pod connections are masqueraded or keep the pod's address, with the rule lines that show it.

import { canonicalSafe, NatRules } from '../kernel/nat/nat-rules.js';
import { findOptions } from '../kernel/nat/rule-spec.js';
import type { IpsetSet, IptablesDump, IptablesRule, NatFamily, NatSnapshot } from '../kernel/nat/types.js';
import type { NftSnapshot } from '../kernel/nft/types.js';
import type { TrafficPolicy } from '../model/service.js';
import { kubeNftFacts } from './nftables.js';
import { OwnText } from './own-text.js';
import { podSelectorsOf } from './pod-selectors.js';
import type { KubeNatFacts, LoadBalancerFact, NodePortFact, NodePortSource } from './types.js';
import { type WalkResult, type WalkTables, walkNat } from './walk.js';

export type { KubeNatFacts, LoadBalancerFact } from './types.js';

/** A NodePort fact's evidence lines, e.g. 'ipset KUBE-NODE-PORT-TCP member 30080 (iptables-nft-save:21: -A ...)'. */
export function nodePortEvidence(fact: NodePortFact): string[] {
  return fact.shownBy.map((s) =>
    typeof s === 'string' ? s : `ipset ${s.set} member ${s.member ?? String(fact.port)} (${s.rule})`,
  );
}

const IPTABLES_CHAIN = /^KUBE-(SVC|SEP|EXT|SVL|FW|XLB)-/;

/** Filter chains where kube-proxy (1.25+ iptables mode) drops Service traffic the nat table left alone. */
export const FILTER_DROP_CHAINS = ['KUBE-PROXY-FIREWALL', 'KUBE-EXTERNAL-SERVICES'] as const;

/** readNat's factsOnly result: the derived facts without the parsed rules, which the agent never keeps. */
export type NatFactsSnapshot = NatSnapshot & { facts?: KubeNatFacts };

/** From the iptables/ipset snapshot and kube-proxy's nftables tables, either of which may be missing. */
export function kubeNatFacts(nat: NatFactsSnapshot | undefined, nftTables?: NftSnapshot): KubeNatFacts {
  const dumps = [nat?.v4, nat?.v6].filter((d): d is IptablesDump => !!d);
  const x =
    nat?.facts ??
    natRulesFacts(
      dumps.map((d) => NatRules.ofDump(d, FILTER_DROP_CHAINS)),
      nat?.ipsets?.sets ?? [],
    );
  const nft = kubeNftFacts(nftTables);
  // A copy: the facts a factsOnly read kept are shared by every diagnosis.
  const facts: KubeNatFacts = {
    ...x,
    // On an nftables node the empty xtables nat table is expected, not evidence.
    modeEvidence: [
      ...(nft.active ? x.modeEvidence.filter((l) => !l.endsWith(NO_KUBE_SERVICES)) : x.modeEvidence),
      ...nft.modeEvidence,
    ],
    podSelectors: { ...x.podSelectors },
    loadBalancers: [...x.loadBalancers],
    nodePorts: [...x.nodePorts],
  };
  const iptables = x.mode === 'iptables' || x.mode === 'mixed';
  const ipvs = x.mode === 'ipvs' || x.mode === 'mixed';
  if (nft.active) {
    for (const [fam, sel] of Object.entries(nft.podSelectors)) {
      const f = Number(fam) as NatFamily;
      const had = facts.podSelectors[f];
      if (!had || had.cidrs.length + had.interfaces.length === 0) facts.podSelectors[f] = sel;
    }
    facts.loadBalancers.push(...nft.loadBalancers);
    facts.nodePorts.push(...nft.nodePorts);
    facts.nftLayouts = nft.layouts;
  }
  const modes = [iptables && 'iptables', ipvs && 'ipvs', nft.active && 'nftables'].filter(
    (m): m is KubeNatFacts['mode'] => !!m,
  );
  facts.mode = modes.length > 1 ? 'mixed' : (modes[0] ?? 'none');
  if (!iptables) delete facts.iptablesGeneration;
  const unreadable = unreadableFamilies(nat, nftTables, { xtables: x.mode !== 'none', nftables: nft.active });
  if (Object.keys(unreadable).length > 0) facts.unreadable = unreadable;
  return facts;
}

/** The families whose rules are unknown, of the datapath in use: a failed read of the other one's is no gap. */
function unreadableFamilies(
  nat: NatSnapshot | undefined,
  nft: NftSnapshot | undefined,
  inUse: { xtables: boolean; nftables: boolean },
): Partial<Record<NatFamily, string>> {
  const out: Partial<Record<NatFamily, string>> = {};
  if (inUse.xtables || !inUse.nftables) Object.assign(out, nat?.unreadable);
  if (inUse.nftables || !inUse.xtables) {
    if (nft?.unreadable?.ip) out[4] ??= nft.unreadable.ip;
    if (nft?.unreadable?.ip6) out[6] ??= nft.unreadable.ip6;
  }
  return out;
}

const NO_KUBE_SERVICES = ': no KUBE-SERVICES chain in the nat table';

/**
 * What each family's nat table and the ipsets alone say ('mixed' = chains of both iptables and IPVS mode).
 * Formats (kubernetes pkg/proxy/iptables, ipvs):
 *   iptables < 1.24: "loadbalancer IP" -> KUBE-FW-X; Cluster: -> KUBE-MARK-MASQ, KUBE-SVC-X;
 *     Local: -> KUBE-XLB-X "Redirect pods ..." -> KUBE-SVC-X (no mark).
 *   iptables >= 1.24: -> KUBE-EXT-X (or KUBE-FW-X with source ranges); Cluster: "masquerade traffic for ..."
 *     -> KUBE-MARK-MASQ; Local: "pod traffic for ..." -> KUBE-SVC-X, then KUBE-SVL-X.
 *   IPVS: KUBE-SERVICES --match-set KUBE-LOAD-BALANCER -> KUBE-LOAD-BALANCER: KUBE-LOAD-BALANCER-LOCAL -> RETURN,
 *     then KUBE-MARK-MASQ. nftables (`table ip|ip6 kube-proxy`) is read by nftables.ts and merged in kubeNatFacts.
 */
export function natRulesFacts(tables: readonly NatRules[], ipsets: readonly IpsetSet[]): KubeNatFacts {
  const sets = new Map(ipsets.map((s) => [s.name, s] as const));
  const facts: KubeNatFacts = { mode: 'none', modeEvidence: [], podSelectors: {}, loadBalancers: [], nodePorts: [] };
  const text = new OwnText();
  let iptables = false;
  let ipvs = false;
  for (const chains of tables) {
    const names = chains.chainNames();
    const ipt = names.filter((n) => IPTABLES_CHAIN.test(n) || n === 'KUBE-NODEPORTS');
    const vs = names.filter((n) => n === 'KUBE-LOAD-BALANCER' || n === 'KUBE-NODE-PORT');
    if (ipt.length) facts.modeEvidence.push(text.own(`${chains.source}: iptables-mode chains ${sample(ipt)}`));
    if (vs.length) facts.modeEvidence.push(text.own(`${chains.source}: IPVS-mode chains ${sample(vs)}`));
    if (!chains.has('KUBE-SERVICES')) facts.modeEvidence.push(`${chains.source}${NO_KUBE_SERVICES}`);
    iptables ||= ipt.length > 0;
    ipvs ||= vs.length > 0;
    if (names.some((n) => n.startsWith('KUBE-XLB-'))) facts.iptablesGeneration = 'pre-1.24';
    else if (names.some((n) => n.startsWith('KUBE-EXT-') || n.startsWith('KUBE-SVL-')))
      facts.iptablesGeneration ??= '1.24+';

    const familySets = new Map(
      [...sets].filter(([, s]) => !s.family || (s.family === 'inet' ? 4 : 6) === chains.family),
    );
    const t: WalkTables = { chains, sets: familySets, pod: podSelectorsOf(chains) };
    facts.podSelectors[chains.family] = t.pod;
    facts.loadBalancers.push(...loadBalancers(t, text));
    facts.nodePorts.push(...iptablesNodePorts(t, text), ...ipvsNodePorts(t, text));
  }
  facts.mode = iptables && ipvs ? 'mixed' : iptables ? 'iptables' : ipvs ? 'ipvs' : 'none';
  if (!iptables) delete facts.iptablesGeneration;
  return facts;
}

interface VipCandidate {
  vip: string;
  port: number;
  protocol: string;
  service?: string;
  /** The rule or ipset member that names this VIP. */
  origin: string;
}

function loadBalancers(tables: WalkTables, text: OwnText): LoadBalancerFact[] {
  const start = some(tables.chains.rules('PREROUTING', 'KUBE-SERVICES'), (r) => r.target === 'KUBE-SERVICES')
    ? 'PREROUTING'
    : 'KUBE-SERVICES';
  const source = tables.chains.source;
  const seen = new Set<string>();
  const out: LoadBalancerFact[] = [];
  for (const c of [...iptablesVips(tables, text), ...ipvsVips(tables, text)]) {
    const key = `${c.vip}|${c.port}|${c.protocol}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const walk = walkNat(tables, start, { dst: c.vip, protocol: c.protocol, dport: c.port });
    const policy = trafficPolicy(tables, walk);
    const evidence = [...new Set([c.origin, ...walkEvidence(source, walk, text)])];
    const drop = sourceRangeDrop(tables.chains, c, walk, text);
    const noLocal = noLocalEndpoints(tables.chains, c, text);
    let capture = captureOf(walk);
    if (drop) {
      evidence.push(...drop.evidence.filter((l) => !evidence.includes(l)));
      if (drop.certain) capture = 'dropped';
    }
    if (noLocal) evidence.push(...noLocal.evidence);
    out.push({
      family: tables.chains.family,
      vip: c.vip,
      port: c.port,
      protocol: c.protocol,
      ...(c.service ? { service: c.service } : {}),
      ...(policy ? { trafficPolicy: policy } : {}),
      podTraffic: walk.masq.some((s) => s.certain) ? 'masquerade' : walk.masq.length ? 'unknown' : 'exempt',
      capture,
      ...(noLocal ? { noEndpoints: noLocal } : {}),
      ...(drop ? { sourceRangeDrop: drop } : {}),
      evidence,
    });
  }
  return out;
}

/**
 * From 1.25 KUBE-FW-X lets the ranges through and the rest meets KUBE-PROXY-FIREWALL's DROP; before, KUBE-FW-X
 * ends in KUBE-MARK-DROP, which kubelet's KUBE-FIREWALL drops.
 */
function sourceRangeDrop(
  chains: NatRules,
  candidate: VipCandidate,
  walk: WalkResult,
  text: OwnText,
): LoadBalancerFact['sourceRangeDrop'] {
  const fw = walk.steps.filter((s) => s.rule.chain.startsWith('KUBE-FW-'));
  const markDrop = fw.find((s) => s.rule.target === 'KUBE-MARK-DROP');
  const fwLines = [
    ...new Set(fw.map((s) => ruleEvidence(chains.source, s.rule, text, s.certain ? '' : ' (may not apply)'))),
  ];
  if (markDrop) return { certain: markDrop.certain, evidence: fwLines };
  const filterDrop = filterRuleFor(chains.filterRules('KUBE-PROXY-FIREWALL'), candidate, 'DROP');
  if (!filterDrop) return undefined;
  const capture = captureOf(walk);
  // Pods whose connections the nat table DNATs (a range holds the pod CIDR) no longer have the VIP as
  // destination in the filter table.
  if (capture === 'dnat') return undefined;
  // The KUBE-FW- chain's rules as written: the walk quotes only those that fired, not the comment-only last one.
  const fwChain = walk.visited.find((v) => v.startsWith('KUBE-FW-'));
  const chainLines = fwChain ? [...chains.rules(fwChain)].map((r) => ruleEvidence(chains.source, r, text)) : [];
  return {
    certain: capture === 'not-captured',
    evidence: [
      ...new Set([...fwLines, ...chainLines, ruleEvidence(chains.source, filterDrop, text, ' (filter table)')]),
    ],
  };
}

/** ETP=Local without local endpoints (1.24+): KUBE-EXTERNAL-SERVICES drops "has no local endpoints" traffic. */
function noLocalEndpoints(chains: NatRules, candidate: VipCandidate, text: OwnText): LoadBalancerFact['noEndpoints'] {
  const r = filterRuleFor(chains.filterRules('KUBE-EXTERNAL-SERVICES'), candidate, 'DROP');
  if (!r?.comment?.endsWith(' has no local endpoints')) return undefined;
  return { verdict: 'drop', preDnatChecks: [], evidence: [ruleEvidence(chains.source, r, text, ' (filter table)')] };
}

/** The filter rule with -d VIP, -p proto and --dport port and the given target. */
function filterRuleFor(
  rules: readonly IptablesRule[],
  candidate: VipCandidate,
  target: string,
): IptablesRule | undefined {
  const vip = canonicalSafe(candidate.vip);
  return rules.find((r) => {
    if (r.target !== target) return false;
    const { dst, proto, port } = destinationOf(r);
    return (
      !!dst &&
      !dst.negated &&
      canonicalSafe(hostOf(dst.values[0]!)) === vip &&
      proto?.toLowerCase() === candidate.protocol &&
      Number(port) === candidate.port
    );
  });
}

/** A rule's first base `-d`, its `-p` and its `--dport` as written. */
function destinationOf(r: IptablesRule) {
  return {
    dst: findOptions(r.matches, '-d', '')[0],
    proto: findOptions(r.matches, '-p', '')[0]?.values[0],
    port: findOptions(r.matches, '--dport')[0]?.values[0],
  };
}

/** '192.0.2.10/32' -> '192.0.2.10': kube-proxy writes a VIP match as a host prefix. */
const hostOf = (dst: string): string => dst.replace(/\/(32|128)$/, '');

function iptablesVips(tables: WalkTables, text: OwnText): VipCandidate[] {
  const out: VipCandidate[] = [];
  for (const r of tables.chains.rules('KUBE-SERVICES', LB_COMMENT_END)) {
    if (!r.comment?.endsWith(LB_COMMENT_END)) continue;
    const { dst, proto, port } = destinationOf(r);
    const d = dst?.values[0];
    if (!d || !proto || !port) continue;
    out.push({
      vip: text.own(hostOf(d)),
      port: Number(port),
      protocol: text.protocol(proto),
      service: text.own(r.comment.slice(0, -LB_COMMENT_END.length)),
      origin: ruleEvidence(tables.chains.source, r, text),
    });
  }
  return out;
}

/** IPVS mode: the members of the sets that KUBE-SERVICES matches to jump to KUBE-LOAD-BALANCER. */
function ipvsVips(tables: WalkTables, text: OwnText): VipCandidate[] {
  const out: VipCandidate[] = [];
  for (const r of tables.chains.rules('KUBE-SERVICES', 'KUBE-LOAD-BALANCER')) {
    if (r.target !== 'KUBE-LOAD-BALANCER') continue;
    for (const o of findOptions(r.matches, '--match-set', 'set')) {
      const set = tables.sets.get(o.values[0] ?? '');
      for (const m of set?.members ?? []) {
        const [ip, protoPort] = m.entry.split(',');
        const [proto, port] = (protoPort ?? '').split(':');
        if (!ip || !proto || !port) continue;
        out.push({
          vip: text.own(ip),
          port: Number(port),
          protocol: text.protocol(proto),
          origin: text.join('ipset ', set!.name, ' member ', m.entry),
        });
      }
    }
  }
  return out;
}

/** externalTrafficPolicy from the shape of the chains the VIP's traffic passes. */
function trafficPolicy(tables: WalkTables, walk: WalkResult): TrafficPolicy | undefined {
  for (const chain of walk.visited) {
    const policy = jumpPolicy(tables, chain);
    if (policy) return policy;
    if (chain.startsWith('KUBE-FW-')) {
      // Before 1.24 KUBE-FW-X marks and jumps to KUBE-SVC-X (Cluster) or jumps to KUBE-XLB-X (Local);
      // from 1.24 it filters source ranges and jumps to KUBE-EXT-X.
      const targets = [...tables.chains.rules(chain)].map((r) => r.target ?? '');
      const next = targets.find((c) => c.startsWith('KUBE-XLB-')) ?? targets.find((c) => c.startsWith('KUBE-EXT-'));
      return next ? jumpPolicy(tables, next) : 'Cluster';
    }
    if (chain === 'KUBE-LOAD-BALANCER') {
      const local = walk.lookups.some(
        (l) => l.rule.chain === chain && l.rule.target === 'RETURN' && l.result === 'yes',
      );
      return local ? 'Local' : 'Cluster';
    }
  }
  return undefined;
}

/** The policy a jump to `chain` shows: KUBE-XLB- is ETP=Local, KUBE-EXT- tells by its rules. */
function jumpPolicy(tables: WalkTables, chain: string): TrafficPolicy | undefined {
  if (chain.startsWith('KUBE-XLB-')) return 'Local';
  if (!chain.startsWith('KUBE-EXT-')) return undefined;
  const local = some(
    tables.chains.rules(chain),
    (r) =>
      r.target?.startsWith('KUBE-SVL-') ||
      r.comment?.startsWith('pod traffic for ') ||
      r.comment?.startsWith('masquerade LOCAL traffic for '),
  );
  return local ? 'Local' : 'Cluster';
}

function captureOf({ end, visited, steps }: WalkResult): LoadBalancerFact['capture'] {
  if (end === 'dnat') return 'dnat';
  if (end === 'drop' || end === 'reject') return 'dropped';
  if (end === 'accept') return visited.includes('KUBE-LOAD-BALANCER') ? 'ipvs' : 'unknown';
  if (end === 'loop') return 'unknown';
  return steps.some((s) => s.rule.target === 'DNAT') ? 'unknown' : 'not-captured';
}

/** A Service's endpoint fan-out: KUBE-SVC-/KUBE-SVL- chains jumping to one KUBE-SEP- chain per endpoint. */
const FAN_OUT_CHAIN = /^KUBE-(SVC|SVL)-/;
const ENDPOINT_CHAIN = 'KUBE-SEP-';

function walkEvidence(source: string, walk: WalkResult, text: OwnText): string[] {
  const out: string[] = [];
  // One endpoint shows the path, and quoting every one would grow each kept fact with its endpoints: per fan-out
  // chain, how many endpoint chains were left out and where the line saying so goes.
  const fanOut = new Map<string, { at: number; n: number }>();
  const skippedSep = new Set<string>();
  for (const s of walk.steps) {
    const r = s.rule;
    if (r.target?.startsWith(ENDPOINT_CHAIN) && FAN_OUT_CHAIN.test(r.chain)) {
      const m = fanOut.get(r.chain);
      if (m) {
        skippedSep.add(r.target);
        if (m.n++ === 0) m.at = out.push('') - 1;
        continue;
      }
      fanOut.set(r.chain, { at: -1, n: 0 });
    } else if (r.chain.startsWith(ENDPOINT_CHAIN) && skippedSep.has(r.chain)) continue;
    out.push(ruleEvidence(source, r, text, s.certain ? '' : ' (may not apply)'));
  }
  for (const [chain, { at, n }] of fanOut) {
    if (n === 0) continue;
    const more = ` jumps to ${n} more endpoint chain${n === 1 ? '' : 's'} (KUBE-SEP-... DNAT), like the one above`;
    out[at] = text.join(source, ': ', chain, more);
  }
  for (const l of walk.lookups) {
    const has =
      l.result === 'yes'
        ? ' has '
        : l.certain && l.rule.target === 'RETURN' && l.result === 'no'
          ? ' does not have '
          : undefined;
    if (has) out.push(text.join('ipset ', l.set, has, l.key, ' (', source, ':', String(l.rule.line), ')'));
  }
  return out;
}

function ruleEvidence(source: string, rule: IptablesRule, text: OwnText, suffix = ''): string {
  return text.join(source, ':', String(rule.line), ': -A ', rule.chain, ' ', rule.spec, suffix);
}

function iptablesNodePorts(tables: WalkTables, text: OwnText): NodePortFact[] {
  const byKey = new Map<string, NodePortGathered & { shownBy: string[] }>();
  for (const r of tables.chains.rules('KUBE-NODEPORTS')) {
    const { proto, port } = destinationOf(r);
    if (!port || !proto || !r.target) continue;
    const key = `${proto}|${port}`;
    const fact = byKey.get(key) ?? {
      family: tables.chains.family,
      port: Number(port),
      protocol: text.protocol(proto),
      shownBy: [],
    };
    if (r.comment && !fact.service) fact.service = text.own(r.comment);
    fact.shownBy.push(ruleEvidence(tables.chains.source, r, text));
    const policy = jumpPolicy(tables, r.target) ?? (r.target.startsWith('KUBE-SVC-') ? 'Cluster' : undefined);
    if (policy) fact.trafficPolicy = policy;
    byKey.set(key, fact);
  }
  return [...byKey.values()].map((f) => kept(f, f.shownBy.slice()));
}

/** IPVS mode: KUBE-NODE-PORT matches port sets; the ones that RETURN hold the ETP=Local ports. */
function ipvsNodePorts(tables: WalkTables, text: OwnText): NodePortFact[] {
  const byKey = new Map<string, NodePortGathered>();
  for (const r of tables.chains.rules('KUBE-NODE-PORT')) {
    const p = findOptions(r.matches, '-p', '')[0]?.values[0];
    const proto = p === undefined ? undefined : text.protocol(p);
    const setName = findOptions(r.matches, '--match-set', 'set')[0]?.values[0];
    const set = setName ? tables.sets.get(setName) : undefined;
    if (!proto || !set) continue;
    // One per rule, shared by the facts of all its set's members.
    const byRule = { set: text.own(set.name), rule: ruleEvidence(tables.chains.source, r, text) };
    for (const m of set.members) {
      const port = Number(m.entry.slice(m.entry.lastIndexOf(':') + 1));
      const key = `${proto}|${port}`;
      const fact = byKey.get(key) ?? { family: tables.chains.family, port, protocol: proto, shownBy: [] };
      fact.shownBy.push(m.entry === String(port) ? byRule : { ...byRule, member: text.own(m.entry) });
      if (r.target === 'RETURN') fact.trafficPolicy = 'Local';
      else fact.trafficPolicy ??= 'Cluster';
      byKey.set(key, fact);
    }
  }
  // The facts of ports matched by the same rules hold one array (a few kinds on a node).
  const shared = new Map<string, readonly NodePortSource[]>();
  const ids = new Map<NodePortSource, number>();
  const idOf = (source: NodePortSource): number => ids.get(source) ?? ids.set(source, ids.size).get(source)!;
  return [...byKey.values()].map((f) => {
    const key = f.shownBy.map(idOf).join(',');
    const list = shared.get(key) ?? f.shownBy.slice();
    shared.set(key, list);
    return kept(f, list);
  });
}

type NodePortGathered = Omit<NodePortFact, 'shownBy'> & { shownBy: NodePortSource[] };

/** The fact as the agent keeps it, built whole with an exact-size `shownBy` so that no growth slack stays behind. */
function kept(gathered: NodePortGathered, shownBy: readonly NodePortSource[]): NodePortFact {
  return {
    family: gathered.family,
    port: gathered.port,
    protocol: gathered.protocol,
    ...(gathered.service !== undefined ? { service: gathered.service } : {}),
    ...(gathered.trafficPolicy !== undefined ? { trafficPolicy: gathered.trafficPolicy } : {}),
    shownBy,
  };
}

const LB_COMMENT_END = ' loadbalancer IP';

function some<T>(items: Iterable<T>, test: (item: T) => boolean | undefined): boolean {
  for (const item of items) if (test(item)) return true;
  return false;
}

function sample(names: string[]): string {
  return names.length > 4 ? `${names.slice(0, 4).join(', ')} (+${names.length - 4} more)` : names.join(', ');
}
