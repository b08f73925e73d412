// The one reader of a family's nat table for src/kubeproxy: it keeps save-output rule lines as bytes and parses
// a rule only when asked; SaveLines (iptables-save.ts) judges lines, so malformed ones are skipped as there.
import { canonicalIP } from '../ip.js';
import { parseRule, SaveLines } from './iptables-save.js';
import { eachLine, mayContain } from './lines.js';
import { findOptions } from './rule-spec.js';
import type { IptablesDump, IptablesRule, IptablesTable, NatFamily } from './types.js';

/** Whether a rule line (trimmed) belongs to one of `chains` (`-A CHAIN ...`). */
export function isRuleOfChains(trimmed: string, chains: readonly string[]): boolean {
  return chains.some((c) => trimmed.startsWith(`-A ${c} `));
}

/** Chains below this many rules are walked whole; longer ones through a destination index. */
const INDEX_MIN_RULES = 16;

/** KUBE-SERVICES has a rule per Service IP:port, so rules whose only destination is one host are indexed by it. */
interface ChainIndex {
  /** The chain's rule ids, in order. */
  ids: Int32Array;
  /** Positions of rules without a single-host `-d`, ascending. */
  general: number[];
  /** The general rules parsed, while few: every probe meets them. */
  parsed: Map<number, IptablesRule>;
  /** Positions of rules with `-d HOST/32` (or /128), by canonical HOST, ascending. */
  byDst: Map<string, number[]>;
}

/** The one destination host of a rule (`-d A`, `-d A/32` or `-d A/128`), canonical; undefined for any other. */
function singleHost(rule: IptablesRule): string | undefined {
  const d = findOptions(rule.matches, '-d', '');
  if (d.length !== 1 || d[0]!.negated) return undefined;
  const [addr, len] = (d[0]!.values[0] ?? '').split('/');
  if (len !== undefined && len !== '32' && len !== '128') return undefined;
  return canonicalSafe(addr ?? '') || undefined;
}

export function canonicalSafe(address: string): string {
  try {
    return canonicalIP(address);
  } catch {
    return '';
  }
}

/** Rule and chain positions in typed arrays, so the collector traces no object per rule. */
class RuleRefs {
  start = new Int32Array(1024);
  end = new Int32Array(1024);
  line = new Int32Array(1024);
  next = new Int32Array(1024);
  count = 0;
  private readonly head: number[] = [];
  private readonly tail: number[] = [];
  readonly size: number[] = [];

  newChain(): number {
    this.head.push(-1);
    this.tail.push(-1);
    this.size.push(0);
    return this.head.length - 1;
  }

  add(chain: number, start: number, end: number, line: number): void {
    if (this.count === this.start.length) this.grow();
    const id = this.count++;
    this.start[id] = start;
    this.end[id] = end;
    this.line[id] = line;
    this.next[id] = -1;
    if (this.tail[chain]! < 0) this.head[chain] = id;
    else this.next[this.tail[chain]!] = id;
    this.tail[chain] = id;
    this.size[chain]!++;
  }

  /** Rule ids of a chain, in order. */
  *ids(chain: number): Iterable<number> {
    for (let id = this.head[chain]!; id >= 0; id = this.next[id]!) yield id;
  }

  private grow(): void {
    const bigger = (a: Int32Array<ArrayBuffer>): Int32Array<ArrayBuffer> => {
      const b = new Int32Array(a.length * 2);
      b.set(a);
      return b;
    };
    this.start = bigger(this.start);
    this.end = bigger(this.end);
    this.line = bigger(this.line);
    this.next = bigger(this.next);
  }
}

const NAT_ONLY: ReadonlySet<string> = new Set(['nat']);
/** `-A CHAIN` with a plain chain name: the chain is known without tokenizing the line. */
const RULE_HEAD = /^-A[ \t]+([^ \t"]+)(?=[ \t]|$)/;
/** Parsed small chains kept because a walk comes back to them (the walk, then its policy). */
const CACHE_CHAINS = 32;
const CACHE_MAX_RULES = 64;

/** Text a rule line must hold (see mayContain), or a test of the trimmed line. */
export type LineTest = string | ((line: string) => boolean);

export interface SaveRulesInput {
  source: string;
  family: NatFamily;
  /** The filter table's chains whose rules filterRules gives; the reader keeps no other filter rule. */
  filterChains: readonly string[];
}

export class NatRules {
  readonly family: NatFamily;
  /** Name of the input (command or file), for evidence lines. */
  readonly source: string;
  /** Warnings about the input's structure (SaveLines); rule lines are judged when parsed. */
  readonly warnings: string[];
  private readonly chains = new Map<string, number>();
  private readonly refs = new RuleRefs();
  private readonly names: string[];
  private readonly index = new Map<string, ChainIndex>();
  private readonly cache = new Map<string, IptablesRule[]>();
  private readonly lines: SaveText;
  /** The first filter table's rules of the input's filterChains (few: the caller names the chains it needs). */
  private readonly filter: IptablesRule[] = [];

  /** From a save output, a NatLineStore's kept lines or a dump; throws NatParseError as parseIptablesSave does. */
  constructor(out: Buffer | SaveText, input: SaveRulesInput) {
    const lines = Buffer.isBuffer(out) ? wholeOutput(out) : out;
    this.lines = lines;
    this.family = input.family;
    this.source = input.source;
    let nat: IptablesTable | undefined;
    let at = 0;
    let end = 0;
    const undeclared: string[] = [];
    const save = new SaveLines(
      { source: input.source, family: input.family, tables: NAT_ONLY },
      (table, trimmed, lineNo) => {
        // Only the first nat table counts, as for a parsed dump.
        if (table !== nat) return;
        let chain = RULE_HEAD.exec(trimmed)?.[1];
        if (chain === undefined || !this.chains.has(chain)) {
          // Counters, quotes or an undeclared chain: parse now, so a rule the full parser skips makes no chain.
          const r = parseRule(trimmed, lineNo, 'nat');
          if (!r.ok) return;
          chain = r.rule.chain;
        }
        let id = this.chains.get(chain);
        if (id === undefined) {
          id = this.refs.newChain();
          this.chains.set(chain, id);
          if (!save.declared.has(chain)) undeclared.push(chain);
        }
        this.refs.add(id, at, end, lineNo);
      },
    );
    // Chains are declared before their rules in save output, so RULE_HEAD's fast path finds their refs.
    let declaredSeen = 0;
    let tablesSeen = 0;
    let filterSeen = false;
    let inFilter = false;
    lines.each((start, stop, lineNo) => {
      at = start;
      end = stop;
      const text = lines.text(start, stop);
      save.line(text, lineNo);
      const trimmed = text.trim();
      if (trimmed.startsWith('*')) {
        inFilter = !filterSeen && trimmed.slice(1).trim() === 'filter';
        filterSeen ||= inFilter;
      } else if (trimmed === 'COMMIT') inFilter = false;
      else if (inFilter && isRuleOfChains(trimmed, input.filterChains)) {
        const r = parseRule(trimmed, lineNo, 'filter');
        if (r.ok) this.filter.push(r.rule);
      }
      // A new table starts with its header line, before its first rule.
      if (!nat && save.tables.length > tablesSeen) {
        tablesSeen = save.tables.length;
        nat = save.tables.at(-1)!.name === 'nat' ? save.tables.at(-1) : undefined;
      }
      if (nat) {
        for (; declaredSeen < nat.chains.length; declaredSeen++) {
          const name = nat.chains[declaredSeen]!.name;
          if (!this.chains.has(name)) this.chains.set(name, this.refs.newChain());
        }
      }
    });
    const dump = save.end(lines.lastLine);
    this.warnings = dump.warnings;
    // Map order of a parsed dump: declared chains, then the undeclared ones by first rule.
    const declaredNames = new Set<string>();
    for (const c of nat?.chains ?? []) declaredNames.add(c.name);
    this.names = [...declaredNames, ...undeclared.filter((n) => !declaredNames.has(n))];
  }

  /** The nat table of a parsed dump (its first one, as iptables-restore would apply it). */
  static ofDump(dump: IptablesDump, filterChains: readonly string[]): NatRules {
    return new NatRules(dumpLines(dump, filterChains), { source: dump.source, family: dump.family, filterChains });
  }

  /** Declared chains in order, then chains that only have rules, in order of their first rule. */
  chainNames(): string[] {
    return [...this.names];
  }

  has(chain: string): boolean {
    return this.chains.has(chain);
  }

  /** The chain's rules in order; lines without `mustContain`'s text (or failing its test) are skipped unparsed. */
  *rules(chain: string, mustContain?: LineTest): Iterable<IptablesRule> {
    const cached = this.cache.get(chain);
    if (cached) {
      yield* cached;
      return;
    }
    const c = this.chains.get(chain);
    if (c === undefined) return;
    const keep: IptablesRule[] | undefined =
      this.refs.size[c]! <= CACHE_MAX_RULES && mustContain === undefined ? [] : undefined;
    for (const id of this.refs.ids(c)) {
      const r = this.parseAt(id, mustContain);
      if (!r) continue;
      keep?.push(r);
      yield r;
    }
    if (keep) this.remember(chain, keep);
  }

  /** The rules of `chain` that could match a packet to `dst`, in chain order. */
  candidates(chain: string, dst: string): IptablesRule[] {
    const c = this.chains.get(chain);
    if (c === undefined) return [];
    if (this.refs.size[c]! < INDEX_MIN_RULES) return [...this.rules(chain)];
    let idx = this.index.get(chain);
    if (!idx) {
      idx = this.indexOf(c);
      this.index.set(chain, idx);
    }
    const positions = [...idx.general, ...(idx.byDst.get(canonicalSafe(dst)) ?? [])].sort((a, b) => a - b);
    const out: IptablesRule[] = [];
    for (const pos of positions) {
      const r = idx.parsed.get(pos) ?? this.parseAt(idx.ids[pos]!);
      if (r) out.push(r);
    }
    return out;
  }

  private indexOf(chain: number): ChainIndex {
    const ids = Int32Array.from(this.refs.ids(chain));
    const idx: ChainIndex = { ids, general: [], parsed: new Map(), byDst: new Map() };
    let parsed: Map<number, IptablesRule> | undefined = idx.parsed;
    for (const [pos, id] of ids.entries()) {
      const r = this.parseAt(id);
      if (!r) continue;
      const host = singleHost(r);
      if (host !== undefined) {
        const list = idx.byDst.get(host);
        if (list) list.push(pos);
        else idx.byDst.set(host, [pos]);
        continue;
      }
      idx.general.push(pos);
      parsed?.set(pos, r);
      if (parsed && parsed.size > CACHE_MAX_RULES) {
        parsed.clear();
        parsed = undefined;
      }
    }
    return idx;
  }

  /** The rules of one of the input's filterChains in the first filter table, in order. */
  filterRules(chain: string): IptablesRule[] {
    return this.filter.filter((r) => r.chain === chain);
  }

  private parseAt(id: number, mustContain?: LineTest): IptablesRule | undefined {
    const start = this.refs.start[id]!;
    const text = this.lines.text(start, this.refs.end[id]!).trim();
    if (typeof mustContain === 'string' ? !mayContain(text, mustContain) : mustContain?.(text) === false)
      return undefined;
    const known = this.lines.ruleAt?.(start);
    if (known) return known;
    const r = parseRule(text, this.refs.line[id]!, 'nat');
    return r.ok ? r.rule : undefined;
  }

  private remember(chain: string, rules: IptablesRule[]): void {
    if (this.cache.size >= CACHE_CHAINS) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(chain, rules);
  }
}

/** Lines of a save output, where they are and their text (a whole output, a NatLineStore or a dump's lines). */
export interface SaveText {
  each(fn: (start: number, end: number, lineNo: number) => void): void;
  text(start: number, end: number): string;
  /** The last non-blank line when `each` leaves lines out. */
  readonly lastLine?: number;
  /** The rule a line already parsed to (a dump's), so that it is not parsed again. */
  ruleAt?(start: number): IptablesRule | undefined;
}

function wholeOutput(buf: Buffer): SaveText {
  return { each: (fn) => eachLine(buf, fn), text: (start, end) => buf.toString('utf8', start, end) };
}

/** A dump's first nat table and first filter table's `filterChains` rules as save lines, with line numbers. */
function dumpLines(dump: IptablesDump, filterChains: readonly string[]): SaveText {
  const lines: (string | IptablesRule)[] = [];
  const lineNos: number[] = [];
  let lastLine = 0;
  const add = (line: string | IptablesRule, lineNo: number): void => {
    lines.push(line);
    lineNos.push(lineNo);
    lastLine = Math.max(lastLine, lineNo);
  };
  const nat = dump.tables.find((t) => t.name === 'nat');
  const filter = dump.tables.find((t) => t.name === 'filter');
  for (const table of dump.tables) {
    if (table !== nat && table !== filter) continue;
    add(`*${table.name}`, table.line);
    if (table === nat) for (const c of table.chains) add(`:${c.name} ${c.policy ?? '-'}`, c.line);
    for (const rule of table.rules) if (table === nat || filterChains.includes(rule.chain)) add(rule, rule.line);
    if (table.committed) add('COMMIT', lastLine);
  }
  return {
    each(fn) {
      for (const [i, lineNo] of lineNos.entries()) fn(i, i + 1, lineNo);
    },
    text(start) {
      const line = lines[start]!;
      return typeof line === 'string' ? line : ruleLine(line);
    },
    lastLine,
    ruleAt(start) {
      const line = lines[start];
      return typeof line === 'object' ? line : undefined;
    },
  };
}

/** A rule as iptables-save writes it; a chain name with spaces or quotes is quoted as the tokenizer reads it. */
function ruleLine(rule: IptablesRule): string {
  const chain = /[\s"\\]/.test(rule.chain) ? `"${rule.chain.replace(/["\\]/g, '\\$&')}"` : rule.chain;
  const counters = rule.counters ? `[${rule.counters.packets}:${rule.counters.bytes}] ` : '';
  return `${counters}-A ${chain}${rule.spec === '' ? '' : ` ${rule.spec}`}`;
}
