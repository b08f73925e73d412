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

interface WalkStep {
  rule: IptablesRule;
  /** False when a 'maybe' match on this rule or an enclosing jump could make it not apply. */
  certain: boolean;
}

interface SetLookup {
  set: string;
  key: string;
  result: Tri;
  rule: IptablesRule;
  /** False when the lookup happened under a 'maybe' jump. */
  certain: boolean;
}

type WalkEnd = 'dnat' | 'accept' | 'drop' | 'reject' | 'return' | 'fallthrough' | 'loop';

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

/** How one walk of a chain ended, and what that depends on (see walkChain). */
interface ChainWalk {
  end: WalkEnd;
  /** How many jumps deep below this chain the walk went. */
  height: number;
  /** Whether the walk below hit MAX_DEPTH: then its outcome depends on the depth it started at. */
  cut: boolean;
}

const CUT: ChainWalk = { end: 'loop', height: 0, cut: true };

/** One probe's walk: the result so far, and the chains already walked. */
interface Walk {
  t: WalkTables;
  probe: Probe;
  res: WalkResult;
  /** Walks not cut by MAX_DEPTH, by certainty and chain: the same at any depth their height fits. */
  free: Map<string, ChainWalk>;
  /** Walks cut by MAX_DEPTH, by depth, certainty and chain. */
  deep: Map<string, ChainWalk>;
}

export function walkNat(tables: WalkTables, start: string, probe: Probe): WalkResult {
  const res: WalkResult = { end: 'fallthrough', steps: [], masq: [], lookups: [], visited: [] };
  res.end = walkChain({ t: tables, probe, res, free: new Map(), deep: new Map() }, start, true, 0).end;
  return res;
}

/**
 * Each chain is walked once per probe and certainty (and depth when cut by MAX_DEPTH), since a node may hold
 * chains that jump twice to the next, which would cost 2^depth walks; a cycle still ends 'loop'.
 */
function walkChain(walk: Walk, chain: string, certain: boolean, depth: number): ChainWalk {
  if (depth > MAX_DEPTH) return CUT;
  const key = `${certain ? 1 : 0}|${chain}`;
  const free = walk.free.get(key);
  if (free && depth + free.height <= MAX_DEPTH) return free;
  const deepKey = `${depth}|${key}`;
  const deep = walk.deep.get(deepKey);
  if (deep) return deep;
  const out: ChainWalk = { end: 'fallthrough', height: 0, cut: false };
  out.end = walkRules(walk, chain, certain, depth, out);
  if (out.cut) walk.deep.set(deepKey, out);
  else walk.free.set(key, out);
  return out;
}

/** The chain's rules in order; `out` gathers the height and cut of the chains it jumps to. */
function walkRules(walk: Walk, chain: string, certain: boolean, depth: number, out: ChainWalk): WalkEnd {
  const { t, probe, res } = walk;
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
      // The packet may have ended here: what the rest of the chain does to it is not certain.
      certain = false;
      continue;
    }
    if (!t.chains.has(target)) continue; // MARK, LOG, CONNMARK, ...: the packet goes on
    res.steps.push(step);
    const sub = walkChain(walk, target, sure, depth + 1);
    out.height = Math.max(out.height, sub.height + 1);
    out.cut ||= sub.cut;
    // After -g, the end of the called chain returns past this chain too.
    const passesOn = sub.end === 'return' || sub.end === 'fallthrough';
    if (passesOn && !rule.goto) continue;
    if (m !== 'yes') {
      certain = false;
      continue;
    }
    return passesOn ? 'return' : sub.end;
  }
  return 'fallthrough';
}

function matchRule(tables: WalkTables, rule: IptablesRule, probe: Probe, res: WalkResult, certain: boolean): Tri {
  let acc: Tri = 'yes';
  for (const m of rule.matches) {
    for (const opt of m.options) {
      const r = negate(matchOption(tables, m, opt, rule, probe, res, certain), opt.negated);
      if (r === 'no') return 'no';
      if (r === 'maybe') acc = 'maybe';
    }
  }
  return acc;
}

export function negate(tri: Tri, negated: boolean): Tri {
  if (!negated || tri === 'maybe') return tri;
  return tri === 'yes' ? 'no' : 'yes';
}

function matchOption(
  tables: WalkTables,
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
      if (opt.name === '-s') return podSource(tables.pod, v);
      if (opt.name === '-d') return inCidrSafe(probe.dst, v) ? 'yes' : 'no';
      if (opt.name === '-p') return protoMatches(v, probe.protocol) ? 'yes' : 'no';
      if (opt.name === '-i') return tables.pod.interfaces.includes(v) ? 'yes' : 'maybe';
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
        const result = setMatch(tables, opt.values[0] ?? '', opt.values[1] ?? '', probe);
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
  if (prefix === (cidr.includes(':') ? 128 : 32)) return 'no';
  if (pod.cidrs.length > 0 && !pod.cidrs.some((p) => cidrContains(p, cidr))) return 'no';
  return 'maybe';
}

function setMatch(tables: WalkTables, name: string, flags: string, probe: Probe): { tri: Tri; key?: string } {
  const set = tables.sets.get(name);
  if (!set) return { tri: 'maybe' };
  const dims = set.type.split(':')[1]?.split(',') ?? [];
  const dirs = flags.split(',');
  tables.setIndex ??= new Map();
  const indexKey = `${name}|${flags}`;
  let idx = tables.setIndex.get(indexKey);
  if (!idx) {
    idx = indexSet(set.members, dims, dirs);
    tables.setIndex.set(indexKey, idx);
  }
  let result: Tri = idx.exact.size > 0 && exactKeys(dims, probe).some((k) => idx.exact.has(k)) ? 'yes' : 'no';
  for (let i = 0; i < idx.rest.length && result !== 'yes'; i++) {
    const r = memberMatch(idx.rest[i]!.entry.split(','), dims, dirs, tables.pod, probe);
    if (r === 'yes') result = 'yes';
    else if (r === 'maybe') result = 'maybe';
  }
  return { tri: result, key: probeKey(dims, dirs, probe) };
}

/**
 * IPVS sets hold one member per Service and every VIP's walk looks them up, so members that can equal only one
 * probe's address and port are found by that probe's keys instead of one by one.
 */
interface SetIndex {
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
  let acc: Tri = 'yes';
  for (let i = 0; i < dims.length; i++) {
    const part = parts[i] ?? '';
    const dim = dims[i]!;
    const dir = dirs[i] ?? dirs[dirs.length - 1];
    let r: Tri;
    if (dir === 'src') {
      r = dim === 'port' ? 'maybe' : podSource(pod, part);
    } else if (dim === 'port') {
      const [proto, port] = part.includes(':') ? part.split(':') : [undefined, part];
      r = (!proto || protoMatches(proto, probe.protocol)) && portListHas(port ?? '', probe.dport) ? 'yes' : 'no';
    } else {
      r = inCidrSafe(probe.dst, part) ? 'yes' : 'no';
    }
    if (r === 'no') return 'no';
    if (r === 'maybe') acc = 'maybe';
  }
  return acc;
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
