// Follows a connection's first packet from "some pod on this node" to VIP:port through the nat table, as
// netfilter would; a match the rules cannot decide makes a rule 'maybe', and the walk goes on as uncertain.

import { inCidrSafe } from '../kernel/ip.js';
import { canonicalSafe, type NatRules } from '../kernel/nat/nat-rules.js';
import type { IpsetMember, IpsetSet, IptablesRule, MatchOption, RuleMatch } from '../kernel/nat/types.js';
import { lowerProtocolOfNumberText } from '../model/protocol.js';
import type { PodSelectors } from './pod-selectors.js';

export type Tri = 'yes' | 'no' | 'maybe';

export interface Probe {
  dst: string;
  protocol: string;
  dport: number;
}

export interface WalkTables {
  chains: NatRules;
  sets: Map<string, IpsetSet>;
  pod: PodSelectors;
  /** Per-set index of exact members, built on first lookup (see setMatch()). */
  setIndex?: Map<string, SetIndex>;
}

export interface WalkStep {
  rule: IptablesRule;
  /** False when a 'maybe' match on this rule or an enclosing jump could make it not apply. */
  certain: boolean;
}

export interface SetLookup {
  set: string;
  key: string;
  result: Tri;
  rule: IptablesRule;
  /** False when the lookup happened under a 'maybe' jump. */
  certain: boolean;
}

export type WalkEnd = 'dnat' | 'accept' | 'drop' | 'reject' | 'return' | 'fallthrough' | 'loop';

export interface WalkResult {
  /** How the certain path ended: 'fallthrough' means no nat rule took the packet. */
  end: WalkEnd;
  /** Rules that fired, in order of first firing; a chain entered again with the same certainty adds nothing. */
  steps: WalkStep[];
  /** Jumps to KUBE-MARK-MASQ among the steps. */
  masq: WalkStep[];
  lookups: SetLookup[];
  /** Chains entered, in order of their first entry. */
  visited: string[];
}

/** Jumps deeper than this end the walk as 'loop' (a cycle of chains, or nesting no node has). */
const MAX_DEPTH = 32;
const TERMINAL: Record<string, WalkEnd> = {
  DNAT: 'dnat',
  REDIRECT: 'dnat',
  ACCEPT: 'accept',
  DROP: 'drop',
  REJECT: 'reject',
  RETURN: 'return',
};

/** Walks the chain a rule jumps to, with the certainty of that jump, and gives how that walk ended. */
export type EnterChain<End> = (chain: string, certain: boolean) => End;

/** What walkChains needs to know of one rule language (iptables or nftables). */
export interface ChainRules<End> {
  /** Jumps deeper than this end the walk as `cutEnd`. */
  maxDepth: number;
  /** How a walk ends that goes deeper than `maxDepth`, or comes back to a chain it is inside of. */
  cutEnd: End;
  /** Whether coming back to a chain it is inside of ends the walk at once; else a loop ends at `maxDepth`. */
  loopsEndAtOnce: boolean;
  /** Walks one chain's rules in order, entering the chains they jump to through `enter`. */
  walkRules(chain: string, certain: boolean, enter: EnterChain<End>): End;
}

/** How one walk of a chain ended, and what that depends on. */
interface ChainEnd<End> {
  end: End;
  /** How many jumps deep below this chain the walk went. */
  height: number;
  /** Whether the walk below was cut: then its outcome depends on the depth and path it started from. */
  cut: boolean;
}

/**
 * Walks `start` and the chains it jumps to. Each chain is walked once per certainty (and depth, when the walk
 * was cut), since a listing may hold chains that jump twice to the next, which would cost 2^depth walks; nesting
 * past `maxDepth` ends as `cutEnd`, and so does a loop.
 */
export function walkChains<End>(rules: ChainRules<End>, start: string): End {
  const cutShort: ChainEnd<End> = { end: rules.cutEnd, height: 0, cut: true };
  /** Walks not cut, by certainty and chain: the same at any depth their height fits. */
  const uncut = new Map<string, ChainEnd<End>>();
  /** Walks that were cut, by depth, certainty and chain. */
  const cutAt = new Map<string, ChainEnd<End>>();
  /** The chains being walked, by certainty and chain (a loop comes back to one). */
  const inside = new Set<string>();
  const walk = (chain: string, certain: boolean, depth: number): ChainEnd<End> => {
    if (depth > rules.maxDepth) return cutShort;
    const key = `${certain ? 1 : 0}|${chain}`;
    const known = uncut.get(key);
    if (known && depth + known.height <= rules.maxDepth) return known;
    const depthKey = `${depth}|${key}`;
    const knownAtDepth = cutAt.get(depthKey);
    if (knownAtDepth) return knownAtDepth;
    if (rules.loopsEndAtOnce && inside.has(key)) return cutShort;
    inside.add(key);
    const out: ChainEnd<End> = { end: rules.cutEnd, height: 0, cut: false };
    out.end = rules.walkRules(chain, certain, (next, nextCertain) => {
      const below = walk(next, nextCertain, depth + 1);
      out.height = Math.max(out.height, below.height + 1);
      out.cut ||= below.cut;
      return below.end;
    });
    inside.delete(key);
    if (out.cut) cutAt.set(depthKey, out);
    else uncut.set(key, out);
    return out;
  };
  return walk(start, true, 0).end;
}

/** 'no' when any test is 'no' (testing no further), else 'maybe' when any is 'maybe', else 'yes'. */
export function allOf<T>(items: Iterable<T>, test: (item: T, index: number) => Tri): Tri {
  let result: Tri = 'yes';
  let index = 0;
  for (const item of items) {
    const r = test(item, index++);
    if (r === 'no') return 'no';
    if (r === 'maybe') result = 'maybe';
  }
  return result;
}

/** 'yes' when any test is 'yes' (testing no further), else 'maybe' when any is 'maybe', else 'no'. */
function anyOf<T>(items: Iterable<T>, test: (item: T) => Tri): Tri {
  return negate(
    allOf(items, (item) => negate(test(item), true)),
    true,
  );
}

export function walkNat(tables: WalkTables, start: string, probe: Probe): WalkResult {
  const res: WalkResult = { end: 'fallthrough', steps: [], masq: [], lookups: [], visited: [] };
  res.end = walkChains<WalkEnd>(
    {
      maxDepth: MAX_DEPTH,
      cutEnd: 'loop',
      // Each round of a loop adds its rule lines to the evidence again, and the endpoint-chain count shows them.
      loopsEndAtOnce: false,
      walkRules: (chain, certain, enter) => walkRules(tables, probe, res, chain, certain, enter),
    },
    start,
  );
  return res;
}

/** The chain's rules in order, as netfilter would take the probe through them. */
function walkRules(
  t: WalkTables,
  probe: Probe,
  res: WalkResult,
  chain: string,
  certain: boolean,
  enter: EnterChain<WalkEnd>,
): WalkEnd {
  res.visited.push(chain);
  for (const rule of t.chains.candidates(chain, probe.dst)) {
    const m = matchRule(t, rule, probe, res, certain);
    if (m === 'no') continue;
    const sure = certain && m === 'yes';
    const target = rule.target;
    if (!target) continue;
    const step = { rule, certain: sure };
    if (target === 'KUBE-MARK-MASQ') {
      res.steps.push(step);
      res.masq.push(step);
      continue;
    }
    const terminal = TERMINAL[target];
    if (terminal) {
      res.steps.push(step);
      if (m === 'yes') return terminal;
      continue;
    }
    if (!t.chains.has(target)) continue; // MARK, LOG, CONNMARK, ...: the packet goes on
    res.steps.push(step);
    const sub = enter(target, sure);
    if (m !== 'yes') continue;
    if (sub === 'loop') return 'loop';
    // After -g, the end of the called chain returns past this chain too.
    if (sub !== 'return' && sub !== 'fallthrough') return sub;
    if (rule.goto) return 'return';
  }
  return 'fallthrough';
}

function matchRule(t: WalkTables, rule: IptablesRule, probe: Probe, res: WalkResult, certain: boolean): Tri {
  return allOf(rule.matches, (m) =>
    allOf(m.options, (opt) => negate(matchOption(t, m, opt, rule, probe, res, certain), opt.negated)),
  );
}

export function negate(r: Tri, negated: boolean): Tri {
  if (!negated || r === 'maybe') return r;
  return r === 'yes' ? 'no' : 'yes';
}

function matchOption(
  t: WalkTables,
  m: RuleMatch,
  opt: MatchOption,
  rule: IptablesRule,
  probe: Probe,
  res: WalkResult,
  certain: boolean,
): Tri {
  const v = opt.values[0] ?? '';
  switch (m.module) {
    case '':
      if (opt.name === '-s') return podSource(t.pod, v);
      if (opt.name === '-d') return inCidrSafe(probe.dst, v) ? 'yes' : 'no';
      if (opt.name === '-p') return protoMatches(v, probe.protocol) ? 'yes' : 'no';
      if (opt.name === '-i') return t.pod.interfaces.includes(v) ? 'yes' : 'maybe';
      if (opt.name === '-f') return 'no'; // the first packet of a connection is no later fragment
      return 'maybe';
    case 'comment':
    case 'nfacct':
      return 'yes';
    case 'tcp':
    case 'udp':
    case 'sctp':
    case 'multiport':
      if (opt.name === '--dport' || opt.name === '--destination-port' || opt.name === '--dports') {
        return portListHas(opt.values.join(','), probe.dport) ? 'yes' : 'no';
      }
      return 'maybe';
    case 'addrtype':
      // Pod addresses are not local addresses of the node.
      if (opt.name === '--src-type') return v.split(',').includes('LOCAL') ? 'no' : 'maybe';
      return 'maybe';
    case 'conntrack':
    case 'state':
      // The nat table only ever sees the first packet of a connection.
      if (opt.name === '--ctstate' || opt.name === '--state') return v.split(',').includes('NEW') ? 'yes' : 'no';
      return 'maybe';
    case 'set':
      if (opt.name === '--match-set') {
        const result = setMatch(t, opt.values[0] ?? '', opt.values[1] ?? '', probe);
        if (result.key) res.lookups.push({ set: opt.values[0]!, key: result.key, result: result.tri, rule, certain });
        return result.tri;
      }
      return 'maybe';
    default:
      return 'maybe';
  }
}

/** Whether a packet from a pod matches `-s cidr`. */
function podSource(pod: PodSelectors, cidr: string): Tri {
  const prefix = prefixLen(cidr);
  if (prefix === 0) return 'yes';
  if (pod.cidrs.some((p) => cidrContains(cidr, p))) return 'yes';
  // A single address is one endpoint (the hairpin rule), not "a client pod".
  if (prefix === 32 || prefix === 128) return 'no';
  if (pod.cidrs.length > 0 && !pod.cidrs.some((p) => cidrContains(p, cidr))) return 'no';
  return 'maybe';
}

function setMatch(t: WalkTables, name: string, flags: string, probe: Probe): { tri: Tri; key?: string } {
  const set = t.sets.get(name);
  if (!set) return { tri: 'maybe' };
  const dims = set.type.split(':')[1]?.split(',') ?? [];
  const dirs = flags.split(',');
  t.setIndex ??= new Map();
  const indexKey = `${name}|${flags}`;
  let idx = t.setIndex.get(indexKey);
  if (!idx) {
    idx = indexSet(set.members, dims, dirs);
    t.setIndex.set(indexKey, idx);
  }
  const exact = idx.exact.size > 0 && exactKeys(dims, probe).some((k) => idx.exact.has(k));
  const tri = exact ? 'yes' : anyOf(idx.rest, (m) => memberMatch(m.entry.split(','), dims, dirs, t.pod, probe));
  return { tri, key: probeKey(dims, dirs, probe) };
}

/**
 * IPVS sets hold one member per Service and every VIP's walk looks them up, so members that can equal only one
 * probe's address and port are found by that probe's keys instead of one by one.
 */
export interface SetIndex {
  exact: Set<string>;
  /** Members that may match more than one probe (ranges, CIDRs, 'src' parts): compared in full. */
  rest: IpsetMember[];
}

function indexSet(members: IpsetMember[], dims: string[], dirs: string[]): SetIndex {
  const idx: SetIndex = { exact: new Set(), rest: [] };
  for (const m of members) {
    const key = memberKey(m.entry.split(','), dims, dirs);
    if (key === undefined) idx.rest.push(m);
    else idx.exact.add(key);
  }
  return idx;
}

const PLAIN_PROTO = /^[a-z]+$/i;
const PLAIN_PORT = /^\d+$/;

/** The key only one probe has, when the member matches exactly that probe; else undefined. */
function memberKey(parts: string[], dims: string[], dirs: string[]): string | undefined {
  if (dims.length === 0) return undefined;
  const out: string[] = [];
  for (let i = 0; i < dims.length; i++) {
    const part = parts[i] ?? '';
    if ((dirs[i] ?? dirs[dirs.length - 1]) === 'src') return undefined;
    if (dims[i] === 'port') {
      const colon = part.indexOf(':');
      // A port without a protocol (bitmap:port sets) matches it under any protocol.
      if (colon < 0) {
        if (!PLAIN_PORT.test(part)) return undefined;
        out.push(`*:${Number(part)}`);
        continue;
      }
      const proto = part.slice(0, colon).toLowerCase();
      const port = part.slice(colon + 1);
      if (!PLAIN_PROTO.test(proto) || proto === 'all' || !PLAIN_PORT.test(port)) return undefined;
      out.push(`${proto}:${Number(port)}`);
    } else if (dims[i] === 'ip' || dims[i] === 'net') {
      const c = part.includes('/') ? '' : canonicalSafe(part);
      if (c === '') return undefined;
      out.push(c);
    } else return undefined;
  }
  return out.join(',');
}

/** The keys of the exact members the probe matches (see memberKey): its protocol's, and any protocol's. */
function exactKeys(dims: string[], probe: Probe): string[] {
  const key = (anyProto: boolean): string =>
    dims
      .map((dim) => (dim === 'port' ? `${anyProto ? '*' : probe.protocol}:${probe.dport}` : canonicalSafe(probe.dst)))
      .join(',');
  return dims.includes('port') ? [key(false), key(true)] : [key(false)];
}

function memberMatch(parts: string[], dims: string[], dirs: string[], pod: PodSelectors, probe: Probe): Tri {
  return allOf(dims, (dim, i) => {
    const part = parts[i] ?? '';
    const dir = dirs[i] ?? dirs[dirs.length - 1];
    if (dir === 'src') return dim === 'port' ? 'maybe' : podSource(pod, part);
    if (dim === 'port') {
      const [proto, port] = part.includes(':') ? part.split(':') : [undefined, part];
      return (!proto || protoMatches(proto, probe.protocol)) && portListHas(port ?? '', probe.dport) ? 'yes' : 'no';
    }
    return inCidrSafe(probe.dst, part) ? 'yes' : 'no';
  });
}

/** The element text the probe would look up, e.g. '192.0.2.10,tcp:80' (src parts shown as 'pod'). */
function probeKey(dims: string[], dirs: string[], probe: Probe): string {
  return dims
    .map((dim, i) => {
      if ((dirs[i] ?? dirs[dirs.length - 1]) === 'src') return dim === 'port' ? 'pod-port' : 'pod';
      return dim === 'port' ? `${probe.protocol}:${probe.dport}` : probe.dst;
    })
    .join(',');
}

function protoMatches(written: string, proto: string): boolean {
  const w = written.toLowerCase();
  return w === 'all' || w === '0' || w === proto || lowerProtocolOfNumberText(w) === proto;
}

/** '80', '80:90', '80,443', '30000-30010' (ipset ranges). */
function portListHas(list: string, port: number): boolean {
  return list.split(',').some((item) => {
    const [a, b] = item.split(/[:-]/);
    const lo = Number(a);
    const hi = b === undefined ? lo : Number(b);
    return port >= lo && port <= hi;
  });
}

function prefixLen(cidr: string): number {
  const slash = cidr.indexOf('/');
  if (slash >= 0) return Number(cidr.slice(slash + 1));
  return cidr.includes(':') ? 128 : 32;
}

/** Whether `outer` contains all of `inner`. */
export function cidrContains(outer: string, inner: string): boolean {
  const slash = inner.indexOf('/');
  const addr = slash < 0 ? inner : inner.slice(0, slash);
  return prefixLen(inner) >= prefixLen(outer) && inCidrSafe(addr, outer);
}
