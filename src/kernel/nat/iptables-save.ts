// Parser of iptables-save / ip6tables-save text (legacy and nft print the same format): one-line problems become
// warnings and the rest is kept; input that is not save output at all is a NatParseError.
import { lineIssue, NatParseError, truncate } from './errors.js';
import { parseRuleSpec } from './rule-spec.js';
import { tokenize } from './tokenize.js';
import type { IptablesDump, IptablesRule, IptablesTable, NatFamily } from './types.js';

const BUILTIN_CHAINS = new Set(['PREROUTING', 'INPUT', 'FORWARD', 'OUTPUT', 'POSTROUTING']);
const COUNTERS = /^\[(\d+):(\d+)\]$/;

export interface SaveInput {
  /** Name of the input used in messages: a command ('iptables-nft-save') or a file path. */
  source: string;
  family: NatFamily;
  /** Only these tables' chains and rules are kept (the others' headers still are, empty). */
  tables?: ReadonlySet<string>;
}

export function parseIptablesSave(text: string, input: SaveInput): IptablesDump {
  const save: SaveLines = new SaveLines(input, (table, trimmed, lineNo) => {
    const r = parseRule(trimmed, lineNo, table.name);
    if (!r.ok) save.warnings.push(lineIssue(input.source, lineNo, r.error));
    else {
      if (!save.declared.has(r.rule.chain))
        save.warnings.push(lineIssue(input.source, lineNo, `rule for undeclared chain '${r.rule.chain}'`));
      table.rules.push(r.rule);
    }
  });
  const lines = text.split('\n');
  for (let idx = 0; idx < lines.length; idx++) save.line(lines[idx]!, idx + 1);
  return save.end();
}

/** The structure of a save output (tables, chain declarations, COMMIT); what a rule line becomes is onRule's. */
export class SaveLines {
  readonly warnings: string[] = [];
  readonly tables: IptablesTable[] = [];
  /** Chains declared so far in the current table. */
  declared = new Set<string>();
  private table: IptablesTable | undefined;
  private lastLine = 0;
  private unrecognised: string | undefined;

  constructor(
    private readonly input: SaveInput,
    private readonly onRule: (table: IptablesTable, trimmed: string, lineNo: number) => void,
  ) {}

  /** One line (without its newline), 1-based. Throws NatParseError for input that is no save output. */
  line(raw: string, lineNo: number): void {
    const { source } = this.input;
    const trimmed = raw.trim();
    if (trimmed === '') return;
    this.lastLine = lineNo;
    const first = trimmed.charCodeAt(0);
    if (first === 0x23 /* # */) {
      // iptables-nft-save says so when a table holds rules it cannot express.
      if (/incompatible/i.test(trimmed)) this.warnings.push(lineIssue(source, lineNo, trimmed.slice(1).trim()));
      return;
    }
    if (first === 0x2a /* * */) {
      const name = trimmed.slice(1).trim();
      if (!/^[a-z_]+$/.test(name)) throw new NatParseError(source, lineNo, `bad table header '${trimmed}'`);
      if (this.table)
        this.warnings.push(lineIssue(source, lineNo, `table '${this.table.name}' has no COMMIT before '*${name}'`));
      if (this.tables.some((t) => t.name === name))
        this.warnings.push(lineIssue(source, lineNo, `table '${name}' appears twice`));
      this.table = { name, chains: [], rules: [], committed: false, line: lineNo };
      this.tables.push(this.table);
      this.declared = new Set();
      return;
    }
    if (trimmed === 'COMMIT') {
      if (!this.table) this.warnings.push(lineIssue(source, lineNo, 'COMMIT outside a table'));
      else this.table.committed = true;
      this.table = undefined;
      return;
    }
    const table = this.table;
    if (table && this.input.tables && !this.input.tables.has(table.name)) return;
    if (first === 0x3a /* : */) {
      if (!table)
        throw new NatParseError(source, lineNo, 'chain declared before any table header (*nat, *filter, ...)');
      const [name, policy, counters] = trimmed.slice(1).split(/\s+/);
      if (!name) {
        this.warnings.push(lineIssue(source, lineNo, 'chain declaration without a name'));
        return;
      }
      const c = counters ? COUNTERS.exec(counters) : null;
      table.chains.push({
        name,
        builtin: BUILTIN_CHAINS.has(name),
        ...(policy && policy !== '-' ? { policy } : {}),
        ...(c ? { counters: { packets: Number(c[1]), bytes: Number(c[2]) } } : {}),
        line: lineNo,
      });
      this.declared.add(name);
      return;
    }
    if (first === 0x2d /* - */ || first === 0x5b /* [ */) {
      if (!table) throw new NatParseError(source, lineNo, 'rule before any table header (*nat, *filter, ...)');
      this.onRule(table, trimmed, lineNo);
      return;
    }
    const issue = lineIssue(source, lineNo, `unrecognised line '${truncate(trimmed)}'`);
    this.unrecognised ??= issue;
    this.warnings.push(issue);
  }

  /** The input is over; `lastLine` is its last non-blank line when the caller passed only some lines. */
  end(lastLine = this.lastLine): IptablesDump {
    this.lastLine = Math.max(this.lastLine, lastLine);
    const { source } = this.input;
    if (this.table) {
      this.warnings.push(
        lineIssue(
          source,
          this.lastLine,
          `input ends inside table '${this.table.name}' (no COMMIT): truncated capture?`,
        ),
      );
    }
    if (this.tables.length === 0 && this.unrecognised) {
      throw new NatParseError(source, this.lastLine, `no table found; not iptables-save output (${this.unrecognised})`);
    }
    return { family: this.input.family, source, tables: this.tables, warnings: this.warnings };
  }
}

export type RuleResult = { ok: true; rule: IptablesRule } | { ok: false; error: string };

/** One rule line (trimmed) of table `table`; the error says why the rule is skipped. */
export function parseRule(text: string, lineNo: number, table: string): RuleResult {
  const tok = tokenize(text);
  if (!tok.ok) return { ok: false, error: `rule skipped: ${tok.error}` };
  const words = tok.tokens;
  let counters: { packets: number; bytes: number } | undefined;
  let i = 0;
  const c = words[0] && COUNTERS.exec(words[0].text);
  if (c) {
    counters = { packets: Number(c[1]), bytes: Number(c[2]) };
    i = 1;
  }
  const verb = words[i]?.text;
  const chain = words[i + 1]?.text;
  if (verb !== '-A' || !chain)
    return { ok: false, error: `rule skipped: expected '-A CHAIN ...', got '${truncate(text)}'` };
  const parsed = parseRuleSpec(words.slice(i + 2));
  if (!parsed.ok) return { ok: false, error: `rule skipped: ${parsed.error}` };
  return {
    ok: true,
    rule: {
      table,
      chain,
      spec: specText(text),
      ...parsed.spec,
      ...(counters ? { counters } : {}),
      line: lineNo,
    },
  };
}

/** The text after `-A CHAIN `, byte for byte. */
function specText(line: string): string {
  const m = /^(?:\[\d+:\d+\]\s+)?-A\s+\S+\s*/.exec(line);
  return m ? line.slice(m[0].length) : line;
}
