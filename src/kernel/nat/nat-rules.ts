// One family's nat table as the kube-proxy analysis (kube.ts, walk.ts) asks it:
// which chains exist, a chain's rules in order, and the rules of a chain that
// could match a packet to one address. Two implementations: over a parsed dump
// (snapshot, bundles, tests), and over the save command's bytes, parsing a rule
// only when asked (save-rules.ts: the agent, which must not hold every parsed
// rule of a 5,000-Service node at once).
import { canonicalIP } from '../ip.js';
import { findOptions } from './rule-spec.js';
import type { IptablesDump, IptablesRule, NatFamily } from './types.js';

/** How kube-proxy recognises pod traffic here (its "local traffic detector"). */
export interface PodSelectors {
  cidrs: string[];
  interfaces: string[];
}

export interface NatRules {
  family: NatFamily;
  /** Name of the input (command or file), for evidence lines. */
  source: string;
  /** Declared chains in order, then chains that only have rules, in order of their first rule. */
  chainNames(): string[];
  has(chain: string): boolean;
  /**
   * The chain's rules in order. `mustContain`: only rules whose save-output line contains this
   * text can interest the caller; an implementation may skip the others without parsing them.
   */
  rules(chain: string, mustContain?: string): Iterable<IptablesRule>;
  /** The rules of `chain` that could match a packet to `dst`, in chain order. */
  candidates(chain: string, dst: string): IptablesRule[];
  /** kube-proxy's local traffic detector read back from every rule (see podSelectorsOf). */
  podSelectors(): PodSelectors;
  /** The rules of a FILTER_DROP_CHAINS chain of the filter table, in order. */
  filterRules(chain: FilterDropChain): readonly IptablesRule[];
}

/**
 * The filter-table chains where kube-proxy (1.25+ iptables mode) drops Service traffic the nat
 * table left alone: loadBalancerSourceRanges, and ETP=Local without local endpoints.
 */
export const FILTER_DROP_CHAINS = ['KUBE-PROXY-FIREWALL', 'KUBE-EXTERNAL-SERVICES'] as const;
export type FilterDropChain = (typeof FILTER_DROP_CHAINS)[number];

/** Whether a filter-table rule line belongs to a FILTER_DROP_CHAINS chain (`-A KUBE-PROXY-FIREWALL ...`). */
export function isFilterDropLine(trimmed: string): boolean {
  return FILTER_DROP_CHAINS.some((c) => trimmed.startsWith(`-A ${c} `));
}

/** Chains below this many rules are walked whole; longer ones through a destination index. */
export const INDEX_MIN_RULES = 16;

/**
 * KUBE-SERVICES holds one rule per Service IP and port; walking it for every VIP
 * would be O(VIPs x Services). Rules whose only destination is one host address
 * can match only a probe to that address, so they are looked up by it.
 */
export interface ChainIndex {
  /** Positions of rules without a single-host `-d`, ascending. */
  general: number[];
  /** Positions of rules with `-d HOST/32` (or /128), by canonical HOST, ascending. */
  byDst: Map<string, number[]>;
}

export function emptyIndex(): ChainIndex {
  return { general: [], byDst: new Map() };
}

/** Files the rule at `pos` in the index; true when it is a general one (no single destination host). */
export function indexRule(idx: ChainIndex, pos: number, r: IptablesRule): boolean {
  const d = findOptions(r.matches, '-d', '');
  const host = d.length === 1 && !d[0]!.negated ? hostOf(d[0]!.values[0] ?? '') : undefined;
  if (host === undefined) {
    idx.general.push(pos);
    return true;
  }
  const list = idx.byDst.get(host);
  if (list) list.push(pos);
  else idx.byDst.set(host, [pos]);
  return false;
}

/** The positions a probe to `dst` must look at, ascending. */
export function candidatePositions(idx: ChainIndex, dst: string): number[] {
  const a = idx.general;
  const b = idx.byDst.get(canonicalSafe(dst)) ?? [];
  const out: number[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    if (j >= b.length || (i < a.length && a[i]! < b[j]!)) out.push(a[i++]!);
    else out.push(b[j++]!);
  }
  return out;
}

/** 'A/32', 'A/128' or a bare address -> canonical A; anything wider -> undefined. */
function hostOf(cidr: string): string | undefined {
  const [addr, len] = cidr.split('/');
  if (len !== undefined && len !== '32' && len !== '128') return undefined;
  const c = canonicalSafe(addr ?? '');
  return c === '' ? undefined : c;
}

export function canonicalSafe(address: string): string {
  try {
    return canonicalIP(address);
  } catch {
    return '';
  }
}

/**
 * What one rule adds to kube-proxy's local traffic detector: the source of "pod traffic" /
 * "Redirect pods" rules, and the negated source of masquerade rules for cluster IPs
 * ("! -s podCIDR ... -j KUBE-MARK-MASQ").
 */
export function podSelectorsOfRule(r: IptablesRule): PodSelectors | undefined {
  const c = r.comment ?? '';
  if (c.startsWith(POD_TRAFFIC) || c.startsWith(REDIRECT_PODS)) return sourceSelectors(r, false);
  if (r.target === 'KUBE-MARK-MASQ') return sourceSelectors(r, true);
  return undefined;
}

export const POD_TRAFFIC = 'pod traffic for ';
export const REDIRECT_PODS = 'Redirect pods trying to reach external';

/** Base-match `-s`/`-i` options of a rule that are not negated (or are, with negated=true). */
export function sourceSelectors(rule: IptablesRule, negated: boolean): PodSelectors {
  return {
    cidrs: findOptions(rule.matches, '-s', '')
      .filter((o) => o.negated === negated)
      .map((o) => o.values[0]!),
    interfaces: findOptions(rule.matches, '-i', '')
      .filter((o) => o.negated === negated)
      .map((o) => o.values[0]!),
  };
}

/** Collects selectors in first-seen order, without repeats. */
export class PodSelectorSet {
  private readonly cidrs = new Set<string>();
  private readonly interfaces = new Set<string>();
  add(sel: PodSelectors | undefined): void {
    sel?.cidrs.forEach((x) => this.cidrs.add(x));
    sel?.interfaces.forEach((x) => this.interfaces.add(x));
  }
  value(): PodSelectors {
    return { cidrs: [...this.cidrs], interfaces: [...this.interfaces] };
  }
}

/** The nat table of a parsed dump (the first one, as iptables-restore would apply it). */
export class DumpNatRules implements NatRules {
  readonly family: NatFamily;
  readonly source: string;
  private readonly chains = new Map<string, IptablesRule[]>();
  private readonly index = new Map<string, ChainIndex>();
  private readonly filter: IptablesRule[];

  constructor(dump: IptablesDump) {
    this.family = dump.family;
    this.source = dump.source;
    this.filter = dump.tables.find((t) => t.name === 'filter')?.rules ?? [];
    const nat = dump.tables.find((t) => t.name === 'nat');
    for (const c of nat?.chains ?? []) this.chains.set(c.name, []);
    for (const r of nat?.rules ?? []) {
      const list = this.chains.get(r.chain) ?? [];
      list.push(r);
      this.chains.set(r.chain, list);
    }
  }

  chainNames(): string[] {
    return [...this.chains.keys()];
  }

  has(chain: string): boolean {
    return this.chains.has(chain);
  }

  rules(chain: string): IptablesRule[] {
    return this.chains.get(chain) ?? [];
  }

  candidates(chain: string, dst: string): IptablesRule[] {
    const rules = this.chains.get(chain) ?? [];
    if (rules.length < INDEX_MIN_RULES) return rules;
    let idx = this.index.get(chain);
    if (!idx) {
      idx = emptyIndex();
      for (let pos = 0; pos < rules.length; pos++) indexRule(idx, pos, rules[pos]!);
      this.index.set(chain, idx);
    }
    return candidatePositions(idx, dst).map((p) => rules[p]!);
  }

  podSelectors(): PodSelectors {
    const set = new PodSelectorSet();
    for (const rules of this.chains.values()) for (const r of rules) set.add(podSelectorsOfRule(r));
    return set.value();
  }

  filterRules(chain: FilterDropChain): IptablesRule[] {
    return this.filter.filter((r) => r.chain === chain);
  }
}
