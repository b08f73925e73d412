// What kube-proxy's nftables tables (`table ip|ip6 kube-proxy`, pkg/proxy/nftables) say about LoadBalancer
// traffic on this node, in facts.ts's shape: services -> service-ips vmap -> external-* chains (ETP=Cluster
// masquerade, ETP=Local pod short-circuit), no-endpoint-* drop/reject, and firewall-ips checked pre-DNAT.
import { inCidrSafe, ipFamily } from '../kernel/ip.js';
import type { NatFamily } from '../kernel/nat/types.js';
import { renderElement } from '../kernel/nft/parse.js';
import type { NftElement, NftRule, NftSnapshot, NftTable } from '../kernel/nft/types.js';
import type { PodSelectors } from './pod-selectors.js';
import type { KubeNatFacts, LoadBalancerFact, NodePortFact } from './types.js';
import { cidrContains, negate, type Tri } from './walk.js';

type NftLayout = NonNullable<KubeNatFacts['nftLayouts']>;

interface NftKubeFacts extends Pick<KubeNatFacts, 'modeEvidence' | 'podSelectors' | 'loadBalancers' | 'nodePorts'> {
  /** True when a kube-proxy table holds any Service (service-ips or no-endpoint-services elements). */
  active: boolean;
  layouts: NftLayout;
}

const MAX_DEPTH = 16;
/**
 * nf_tables' NF_IP_PRI_NAT_DST: filter chains below it see the VIP before DNAT, as v1.31 to early v1.33's -110
 * output chains did (kubernetes#131765, dropping host-network clients); #132456 moved them to priority 0.
 */
const DSTNAT_PRIORITY = -100;

export function kubeNftFacts(snap: NftSnapshot | undefined): NftKubeFacts {
  const facts: NftKubeFacts = {
    active: false,
    modeEvidence: [],
    layouts: {},
    podSelectors: {},
    loadBalancers: [],
    nodePorts: [],
  };
  for (const table of snap?.tables ?? []) {
    if (table.name !== 'kube-proxy' || (table.family !== 'ip' && table.family !== 'ip6')) continue;
    const source = snap?.sources[table.family] ?? `nft list table ${table.family} kube-proxy`;
    new TableFacts(table, table.family === 'ip6' ? 6 : 4, source).into(facts);
  }
  return facts;
}

class TableFacts {
  private readonly chains = new Map<string, NftRule[]>();
  private readonly sets: Map<string, NftElement[]>;
  /** Elements of the IP . proto . port maps by that key, and cluster-ips members: one lookup per LB IP, not a scan. */
  private readonly byKey = new Map<string, Map<string, NftElement>>();
  private readonly clusterIps: Set<string>;
  private readonly pod: PodSelectors;

  constructor(
    private readonly t: NftTable,
    private readonly family: NatFamily,
    private readonly source: string,
  ) {
    for (const c of t.chains) this.chains.set(c.name, []);
    for (const r of t.rules) {
      const list = this.chains.get(r.chain) ?? [];
      list.push(r);
      this.chains.set(r.chain, list);
    }
    this.sets = new Map(t.sets.map((s) => [s.name, s.elements]));
    for (const name of ['no-endpoint-services', 'firewall-ips']) {
      const m = new Map<string, NftElement>();
      for (const e of this.sets.get(name) ?? []) m.set(e.key.join(' . '), e);
      this.byKey.set(name, m);
    }
    this.clusterIps = new Set((this.sets.get('cluster-ips') ?? []).map((e) => e.key[0] ?? ''));
    this.pod = this.podSelectors();
  }

  private ruleLine(rule: NftRule, certain = true): string {
    return `${this.source}: chain ${rule.chain}: ${rule.text}${certain ? '' : ' (may not apply)'}`;
  }

  private elementLine(map: string, element: NftElement): string {
    return `${this.source}: map ${map}: ${renderElement(element)}`;
  }

  into(facts: NftKubeFacts): void {
    const serviceIps = this.sets.get('service-ips') ?? [];
    const noEp = this.sets.get('no-endpoint-services') ?? [];
    facts.modeEvidence.push(
      `${this.source}: table ${this.t.family} kube-proxy with ${this.t.chains.length} chains, ` +
        `service-ips ${serviceIps.length} elements, no-endpoint-services ${noEp.length}`,
    );
    facts.active ||= serviceIps.length > 0 || noEp.length > 0;
    facts.podSelectors[this.family] = this.pod;
    const filters = this.filterChains();
    facts.layouts[this.family] = this.layout(filters);
    const checks = this.preDnatEndpointChecks(filters);
    const seen = new Set<string>();
    for (const e of serviceIps) {
      const fact = this.lbFact(e, checks);
      if (!fact) continue;
      seen.add(probeText({ ip: fact.vip, proto: fact.protocol, port: fact.port }));
      facts.loadBalancers.push(fact);
    }
    // No endpoints at all: the LB IP is only in no-endpoint-services (rejected on this node).
    const rejects = (this.chains.get('reject-chain') ?? []).map((r) => this.ruleLine(r));
    for (const e of noEp) {
      const k = keyOf(e);
      const key = k && probeText(k);
      if (!k || !key || seen.has(key) || e.verdict?.kind === 'drop' || this.clusterIps.has(k.ip)) continue;
      seen.add(key);
      const line = this.elementLine('no-endpoint-services', e);
      facts.loadBalancers.push({
        family: this.family,
        vip: k.ip,
        port: k.port,
        protocol: k.proto,
        ...(e.comment ? { service: e.comment } : {}),
        podTraffic: 'unknown',
        capture: 'dropped',
        noEndpoints: { verdict: 'reject', preDnatChecks: checks.map((c) => c.label), evidence: [line] },
        evidence: [line, ...rejects],
      });
    }
    facts.nodePorts.push(...this.nodePorts());
  }

  private element(map: string, k: Probe): NftElement | undefined {
    return this.byKey.get(map)?.get(`${k.ip} . ${k.proto} . ${k.port}`);
  }

  private lbFact(e: NftElement, checks: { label: string; line: string }[]): LoadBalancerFact | undefined {
    const k = keyOf(e);
    const target = e.verdict?.target;
    // ClusterIPs go to service-* chains; LB and external IPs to external-* chains.
    if (!k || !target?.startsWith('external-')) return undefined;
    const evidence = [this.elementLine('service-ips', e)];
    const fwLines: string[] = [];
    const fw = this.firewall(k, fwLines);
    evidence.push(...fwLines);
    const walk: Walk = { masq: [], steps: [], ends: new Map(), active: new Set(), cut: 0 };
    const end = this.walk(target, k, true, 0, walk);
    // A loop, not a spread: a hostile listing's walk may hold more steps than a call takes arguments.
    for (const s of walk.steps) evidence.push(this.ruleLine(s.rule, s.certain));
    const fact: LoadBalancerFact = {
      family: this.family,
      vip: k.ip,
      port: k.port,
      protocol: k.proto,
      service: serviceOfChain(target) ?? e.comment ?? '',
      trafficPolicy: this.trafficPolicy(target),
      podTraffic: walk.masq.some((m) => m) ? 'masquerade' : walk.masq.length ? 'unknown' : 'exempt',
      capture: fw === 'yes' ? 'dropped' : end === 'dnat' ? 'dnat' : end === 'dropped' ? 'dropped' : 'unknown',
      evidence,
    };
    if (!fact.service) delete fact.service;
    if (fw !== 'no') fact.sourceRangeDrop = { certain: fw === 'yes', evidence: fwLines };
    if (!this.element('firewall-ips', k)) fact.lbOrExternal = true;
    const drop = this.element('no-endpoint-services', k);
    if (drop?.verdict) {
      const line = this.elementLine('no-endpoint-services', drop);
      fact.noEndpoints = {
        verdict: drop.verdict.kind === 'drop' ? 'drop' : 'reject',
        preDnatChecks: checks.map((c) => c.label),
        evidence: [line, ...checks.map((c) => c.line)],
      };
      evidence.push(line);
    }
    return fact;
  }

  /** firewall-ips: loadBalancerSourceRanges, applied before DNAT to every source, pods included. */
  private firewall(probe: Probe, evidence: string[]): Tri {
    const e = this.element('firewall-ips', probe);
    if (!e?.verdict?.target) return 'no';
    evidence.push(this.elementLine('firewall-ips', e));
    let dropped: Tri = 'no';
    for (const r of this.chains.get(e.verdict.target) ?? []) {
      const m = this.matchRule(r, probe);
      if (m === 'no') continue;
      evidence.push(this.ruleLine(r, m === 'yes'));
      if (r.verdict?.kind === 'drop') dropped = m;
      if (r.verdict) break;
    }
    return dropped;
  }

  /**
   * Follows pod -> VIP as netfilter would; each chain is walked once per probe and certainty, so a hostile
   * listing that jumps twice to one chain at each level cannot cost 2^depth walks.
   */
  private walk(chain: string, probe: Probe, certain: boolean, depth: number, w: Walk): WalkEnd {
    const key = `${certain ? 'sure' : 'maybe'}|${chain}`;
    const done = w.ends.get(key) ?? w.ends.get(`${depth}|${key}`);
    if (done) return done;
    // A loop or nesting past the limit ends unknown, and what a walk saw below it depends on how it was reached,
    // so that walk is kept for its depth only.
    if (depth > MAX_DEPTH || w.active.has(key)) {
      w.cut++;
      return 'unknown';
    }
    w.active.add(key);
    const cut = w.cut;
    const end = this.walkRules(chain, probe, certain, depth, w);
    w.active.delete(key);
    w.ends.set(w.cut === cut ? key : `${depth}|${key}`, end);
    return end;
  }

  private walkRules(chain: string, probe: Probe, certain: boolean, depth: number, w: Walk): WalkEnd {
    for (const r of this.chains.get(chain) ?? []) {
      const m = this.matchRule(r, probe);
      if (m === 'no') continue;
      const sure = certain && m === 'yes';
      const v = r.verdict;
      if (r.setsMark) {
        w.steps.push({ rule: r, certain: sure });
        w.masq.push(sure);
      }
      if (r.nat?.kind === 'dnat' || r.reject || v?.kind === 'drop') {
        w.steps.push({ rule: r, certain: sure });
        if (m === 'yes') return r.nat ? 'dnat' : 'dropped';
        continue;
      }
      if (v?.target === 'mark-for-masquerade') {
        w.steps.push({ rule: r, certain: sure });
        w.masq.push(sure);
        continue;
      }
      const next = v?.target ?? r.vmap?.verdicts[0]?.target;
      if (next !== undefined && this.chains.has(next)) {
        w.steps.push({ rule: r, certain: sure });
        const sub = this.walk(next, probe, sure, depth + 1, w); // numgen picks one endpoint chain; all have the same shape
        if (m !== 'yes') continue;
        if (sub !== 'fallthrough' && sub !== 'return') return sub;
        if (v?.kind === 'goto' || r.vmap) return 'return';
        continue;
      }
      if (v?.kind === 'return' && m === 'yes') return 'return';
      if (v?.kind === 'accept' && m === 'yes') return 'unknown';
    }
    return 'fallthrough';
  }

  /** Whether a rule applies to the first packet from a pod of this node to p. */
  private matchRule(rule: NftRule, probe: Probe): Tri {
    let acc: Tri = 'yes';
    for (const m of rule.matches) {
      const t = this.matchOne(m.left, m.op, m.right, probe);
      if (t === 'no') return 'no';
      if (t === 'maybe') acc = 'maybe';
    }
    return acc;
  }

  private matchOne(left: string, op: string, right: string, probe: Probe): Tri {
    const eq = op === '==' || op === 'in';
    const neq = op === '!=';
    const flip = (tri: Tri): Tri => (eq || neq ? negate(tri, neq) : 'maybe');
    if (left === 'ip saddr' || left === 'ip6 saddr') {
      if (right.startsWith('@') || right.startsWith('{')) return flip(this.podInRanges(right));
      if (!right.includes('/')) return flip('no'); // one endpoint's own address (hairpin): not pods in general
      return flip(this.podInRanges(`{ ${right} }`));
    }
    if (left === 'ip daddr' || left === 'ip6 daddr') {
      if (right.startsWith('@') || right.startsWith('{')) return 'maybe';
      return flip(
        right.includes('/') ? (inCidrSafe(probe.ip, right) ? 'yes' : 'no') : right === probe.ip ? 'yes' : 'no',
      );
    }
    if (/^(tcp|udp|sctp|th) dport$/.test(left)) return flip(Number(right) === probe.port ? 'yes' : 'no');
    if (left === 'meta l4proto') return flip(right === probe.proto ? 'yes' : 'no');
    // A pod's address is not local to the node.
    if (left === 'fib saddr type') return flip(right === 'local' ? 'no' : 'maybe');
    if (left === 'ct state') return flip(right.includes('new') ? 'yes' : 'no');
    if ((left === 'iifname' || left === 'iif') && this.pod.interfaces.includes(unquote(right))) return flip('yes');
    return 'maybe';
  }

  /** A `{ a, b }` or `@set` source match against the pod CIDRs: yes only when each lies in a listed range. */
  private podInRanges(right: string): Tri {
    if (right.startsWith('@') || this.pod.cidrs.length === 0) return 'maybe';
    const ranges = right
      .replace(/[{}]/g, '')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    if (this.pod.cidrs.every((c) => ranges.some((r) => cidrContains(r, c)))) return 'yes';
    if (this.pod.cidrs.every((c) => ranges.every((r) => disjoint(c, r)))) return 'no';
    return 'maybe';
  }

  /** kube-proxy's local traffic detector: "short-circuit pod traffic", `ip saddr != CIDR` masquerade rules. */
  private podSelectors(): PodSelectors {
    const cidrs = new Set<string>();
    const interfaces = new Set<string>();
    for (const r of this.t.rules) {
      const short = r.comment === 'short-circuit pod traffic';
      // Before v1.36 a jump to mark-for-masquerade; from v1.36 the mark is set in the rule itself.
      const masq = r.verdict?.target === 'mark-for-masquerade' || r.setsMark === true;
      for (const m of r.matches) {
        if (!((short && m.op === '==') || (masq && m.op === '!='))) continue;
        // A corrupt CIDR (prefix past the address) selects no pod.
        if ((m.left === 'ip saddr' || m.left === 'ip6 saddr') && !m.right.startsWith('{') && m.right.includes('/')) {
          if (isCidr(m.right)) cidrs.add(m.right);
        }
        if (m.left === 'iifname' || m.left === 'iif') interfaces.add(unquote(m.right));
      }
    }
    return { cidrs: [...cidrs], interfaces: [...interfaces] };
  }

  private filterChains(): FilterChain[] {
    const out: FilterChain[] = [];
    for (const c of this.t.chains) {
      if (c.type !== 'filter' || c.hook === undefined || c.prio === undefined) continue;
      const jumps = (this.chains.get(c.name) ?? []).flatMap((r) =>
        r.verdict?.kind === 'jump' && r.verdict.target ? [r.verdict.target] : [],
      );
      out.push({ name: c.name, hook: c.hook, prio: c.prio, jumps });
    }
    return out;
  }

  private layout(filters: FilterChain[]): NftLayout[NatFamily] {
    const local = filters.filter((c) => ['input', 'forward', 'output'].includes(c.hook) && this.checksNoEndpoints(c));
    if (local.length === 0) return 'other';
    return local.some((c) => c.prio < DSTNAT_PRIORITY) ? 'v1.31' : 'v1.34';
  }

  /** Output-hook chains that consult no-endpoint-services before nat-output's DNAT (kubernetes#131765). */
  private preDnatEndpointChecks(filters: FilterChain[]): { label: string; line: string }[] {
    return filters
      .filter((c) => c.hook === 'output' && c.prio < DSTNAT_PRIORITY && this.checksNoEndpoints(c))
      .map((c) => {
        const jump = (this.chains.get(c.name) ?? []).find(
          (r) => r.verdict?.target && this.vmapsNoEndpoints(r.verdict.target),
        );
        return {
          label: `${c.name} (hook ${c.hook}, priority ${c.prio})`,
          line:
            `${this.source}: chain ${c.name} { type filter hook ` +
            `${c.hook} priority ${c.prio} }: ${jump?.text ?? ''}`,
        };
      });
  }

  /** Found by its vmap, since the chain is service-endpoints-check (endpoints-check before v1.31). */
  private checksNoEndpoints(chain: FilterChain): boolean {
    return chain.jumps.some((j) => this.vmapsNoEndpoints(j));
  }

  private vmapsNoEndpoints(chain: string): boolean {
    return (this.chains.get(chain) ?? []).some((r) => r.vmap?.map === '@no-endpoint-services');
  }

  /** kube-proxy writes these comments only in an ETP=Local Service's external-* chain. */
  private trafficPolicy(externalChain: string): 'Local' | 'Cluster' {
    const local = (this.chains.get(externalChain) ?? []).some(
      (r) => r.comment === 'short-circuit pod traffic' || r.comment === 'masquerade local traffic',
    );
    return local ? 'Local' : 'Cluster';
  }

  private nodePorts(): NodePortFact[] {
    const out: NodePortFact[] = [];
    for (const e of this.sets.get('service-nodeports') ?? []) {
      const [proto, port] = e.key;
      const target = e.verdict?.target;
      if (!proto || !port || !target) continue;
      const service = serviceOfChain(target);
      out.push({
        family: this.family,
        port: Number(port),
        protocol: proto,
        ...(service ? { service } : {}),
        trafficPolicy: this.trafficPolicy(target),
        shownBy: [this.elementLine('service-nodeports', e)],
      });
    }
    return out;
  }
}

/** A filter base chain, and the chains its `ct state new jump X` rules go to. */
interface FilterChain {
  name: string;
  hook: string;
  prio: number;
  jumps: string[];
}

/** The first packet's destination: an element's key (IP . protocol . port). */
interface Probe {
  ip: string;
  proto: string;
  port: number;
}

const probeText = (k: Probe): string => `${k.ip}|${k.proto}|${k.port}`;

type WalkEnd = 'dnat' | 'dropped' | 'return' | 'fallthrough' | 'unknown';

interface Walk {
  /** One entry per masquerade mark on the way: whether it certainly applies. */
  masq: boolean[];
  steps: { rule: NftRule; certain: boolean }[];
  /** How each chain's walk ended, by certainty and chain (or depth, certainty and chain: see walk). */
  ends: Map<string, WalkEnd>;
  /** The chains being walked (a loop comes back to one). */
  active: Set<string>;
  /** How many times the walk stopped at a loop or the depth limit. */
  cut: number;
}

function keyOf(element: NftElement): Probe | undefined {
  const [ip, proto, port] = element.key;
  if (!ip || !proto || !port || ipFamily(ip) === 0 || !/^\d+$/.test(port)) return undefined;
  return { ip, proto, port: Number(port) };
}

/** 'external-42NFTM6N-ns2/svc2/tcp/p80' -> 'ns2/svc2:p80' (kube-proxy's ServicePortName). */
export function serviceOfChain(chain: string): string | undefined {
  const m = /^[a-z]+-[A-Z2-7]{8}-([^/]+)\/([^/]+)\/[a-z]+\/(.*)$/.exec(chain);
  return m ? `${m[1]}/${m[2]}:${m[3]}` : undefined;
}

/** An interface name as nft JSON or text may give it ('"cbr0"' or 'cbr0'). */
function unquote(name: string): string {
  return name.length >= 2 && name.startsWith('"') && name.endsWith('"') ? name.slice(1, -1) : name;
}

/** Whether s is a CIDR (or address) at all: its own address lies in it. */
function isCidr(s: string): boolean {
  const [addr] = s.split('/');
  return !!addr && inCidrSafe(addr, s);
}

/** Whether two CIDRs share no address (prefixes overlap only by nesting); an invalid one holds no address. */
function disjoint(a: string, b: string): boolean {
  return !isCidr(a) || !isCidr(b) || !(cidrContains(a, b) || cidrContains(b, a));
}
