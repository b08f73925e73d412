// The nat table of one iptables-save output, held as bytes (the whole output,
// or the nat lines a NatLineStore kept as the output streamed by) plus where
// each rule line is, and parsed a rule at a time when the kube-proxy
// analysis asks (nat-rules.ts). The agent derives its facts from this: at 5,000
// Services x 4 endpoints (143k nat rules) the parsed rules would take ~250 MB of
// heap, the positions take a few MB. What needs every rule (kube-proxy's pod
// selectors) is collected while the lines go by; lines that cannot matter to it
// are not parsed. The line structure and its errors are iptables-save.ts's
// (SaveLines), so a malformed line is skipped exactly as the full parser skips it.

import { parseRule, SaveLines } from './iptables-save.js';
import { eachLine, lineText, mayContain } from './lines.js';
import { NatLineStore } from './nat-lines.js';
import type { ChainIndex, FilterDropChain, NatRules, PodSelectors } from './nat-rules.js';
import {
  candidatePositions,
  emptyIndex,
  INDEX_MIN_RULES,
  indexRule,
  isFilterDropLine,
  POD_TRAFFIC,
  PodSelectorSet,
  podSelectorsOfRule,
  REDIRECT_PODS,
} from './nat-rules.js';
import type { IptablesRule, IptablesTable, NatFamily } from './types.js';

/**
 * Where the rule lines are, in typed arrays (no objects for the collector to trace): per rule
 * its byte range, line number and the next rule of its chain; per chain its first and last rule
 * and how many it has. 16 bytes a rule; the offsets fit because the reader bounds the output.
 */
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
/** Parsed small chains kept for the walks that come back to them (a walk, then its policy). */
const CACHE_CHAINS = 32;
const CACHE_MAX_RULES = 64;

export interface SaveRulesInput {
  source: string;
  family: NatFamily;
}

export class SaveNatRules implements NatRules {
  readonly family: NatFamily;
  readonly source: string;
  /** Warnings about the input's structure (SaveLines); rule lines are judged when parsed. */
  readonly warnings: string[];
  private readonly chains = new Map<string, number>();
  private readonly refs = new RuleRefs();
  private readonly names: string[];
  private readonly pod: PodSelectors;
  private readonly index = new Map<string, { idx: ChainIndex; ids: Int32Array; general: Map<number, IptablesRule> }>();
  private readonly cache = new Map<string, IptablesRule[]>();
  private readonly lines: SaveText;
  /** The first filter table's FILTER_DROP_CHAINS rules (one per source-ranged or locally endpoint-less LB port: few). */
  private readonly filter: IptablesRule[] = [];

  /**
   * From a whole save output, or the lines of one a NatLineStore kept as it streamed by (the
   * agent). Throws NatParseError for input that is no iptables-save output, as parseIptablesSave does.
   */
  constructor(out: Buffer | NatLineStore, input: SaveRulesInput) {
    const lines = out instanceof NatLineStore ? out : wholeOutput(out);
    this.lines = lines;
    this.family = input.family;
    this.source = input.source;
    let nat: IptablesTable | undefined;
    let at = 0;
    let end = 0;
    const undeclared: string[] = [];
    const contributions = new Map<string, PodSelectors[]>();
    const save = new SaveLines(
      { source: input.source, family: input.family, tables: NAT_ONLY },
      (table, trimmed, lineNo) => {
        // Only the first nat table counts, as for a parsed dump.
        if (table !== nat) return;
        let chain = RULE_HEAD.exec(trimmed)?.[1];
        let parsed: IptablesRule | undefined;
        if (chain === undefined || !this.chains.has(chain)) {
          // Counters, quotes, or a chain not declared (yet): parse now, as the full parser
          // would, so a rule that it would skip creates no chain here either.
          const r = parseRule(trimmed, lineNo, 'nat');
          if (!r.ok) return;
          parsed = r.rule;
          chain = r.rule.chain;
        }
        let id = this.chains.get(chain);
        if (id === undefined) {
          id = this.refs.newChain();
          this.chains.set(chain, id);
          if (!save.declared.has(chain)) undeclared.push(chain);
        }
        this.refs.add(id, at, end, lineNo);
        if (mayAddPodSelectors(trimmed)) {
          if (!parsed) {
            const r = parseRule(trimmed, lineNo, 'nat');
            if (!r.ok) return;
            parsed = r.rule;
          }
          const sel = podSelectorsOfRule(parsed);
          if (sel && sel.cidrs.length + sel.interfaces.length > 0) {
            const c = contributions.get(chain);
            if (c) c.push(sel);
            else contributions.set(chain, [sel]);
          }
        }
      },
    );
    // Chains are declared before their rules in save output; a declared chain gets its refs
    // list when declared so that RULE_HEAD's fast path finds it.
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
      else if (inFilter && isFilterDropLine(trimmed)) {
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
    const sel = new PodSelectorSet();
    for (const name of this.names) for (const s of contributions.get(name) ?? []) sel.add(s);
    this.pod = sel.value();
  }

  chainNames(): string[] {
    return [...this.names];
  }

  has(chain: string): boolean {
    return this.chains.has(chain);
  }

  *rules(chain: string, mustContain?: string): Iterable<IptablesRule> {
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

  candidates(chain: string, dst: string): IptablesRule[] {
    const c = this.chains.get(chain);
    if (c === undefined) return [];
    if (this.refs.size[c]! < INDEX_MIN_RULES) return [...this.rules(chain)];
    let entry = this.index.get(chain);
    if (!entry) {
      const idx = emptyIndex();
      const ids = Int32Array.from(this.refs.ids(c));
      // The rules every probe meets (few in kube-proxy's chains) stay parsed.
      let general: Map<number, IptablesRule> | undefined = new Map();
      for (let pos = 0; pos < ids.length; pos++) {
        const r = this.parseAt(ids[pos]!);
        if (!r || !indexRule(idx, pos, r) || !general) continue;
        general.set(pos, r);
        if (general.size > CACHE_MAX_RULES) general = undefined;
      }
      entry = { idx, ids, general: general ?? new Map() };
      this.index.set(chain, entry);
    }
    const out: IptablesRule[] = [];
    for (const pos of candidatePositions(entry.idx, dst)) {
      const r = entry.general.get(pos) ?? this.parseAt(entry.ids[pos]!);
      if (r) out.push(r);
    }
    return out;
  }

  podSelectors(): PodSelectors {
    return { cidrs: [...this.pod.cidrs], interfaces: [...this.pod.interfaces] };
  }

  filterRules(chain: FilterDropChain): IptablesRule[] {
    return this.filter.filter((r) => r.chain === chain);
  }

  private parseAt(id: number, mustContain?: string): IptablesRule | undefined {
    const text = this.lines.text(this.refs.start[id]!, this.refs.end[id]!).trim();
    if (mustContain !== undefined && !mayContain(text, mustContain)) return undefined;
    const r = parseRule(text, this.refs.line[id]!, 'nat');
    return r.ok ? r.rule : undefined;
  }

  private remember(chain: string, rules: IptablesRule[]): void {
    if (this.cache.size >= CACHE_CHAINS) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(chain, rules);
  }
}

/** Lines of a save output, where they are and their text (a whole output, or a NatLineStore). */
interface SaveText {
  each(fn: (start: number, end: number, lineNo: number) => void): void;
  text(start: number, end: number): string;
  /** The last non-blank line when `each` leaves lines out. */
  readonly lastLine?: number;
}

function wholeOutput(buf: Buffer): SaveText {
  return { each: (fn) => eachLine(buf, fn), text: (start, end) => lineText(buf, start, end) };
}

/**
 * Whether a rule line may add to the pod selectors (podSelectorsOfRule): a "pod traffic" or
 * "Redirect pods" comment, or a jump to KUBE-MARK-MASQ with a negated option ('!').
 */
function mayAddPodSelectors(line: string): boolean {
  if (mayContain(line, POD_TRAFFIC) || mayContain(line, REDIRECT_PODS)) return true;
  return line.includes('!') && mayContain(line, 'KUBE-MARK-MASQ');
}
