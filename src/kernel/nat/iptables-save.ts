// Parser of iptables-save / ip6tables-save text (legacy and nft print the same
// format). Problems confined to one line (an unterminated quote, a rule for an
// undeclared chain, a truncated last table) become warnings and the rest is
// kept; input that is not save output at all is a NatParseError.
import { NatParseError, lineIssue } from './errors.js';
import { parseRuleSpec } from './rule-spec.js';
import { tokenize } from './tokenize.js';
import type { IptablesDump, IptablesTable, NatFamily } from './types.js';

const BUILTIN_CHAINS = new Set(['PREROUTING', 'INPUT', 'FORWARD', 'OUTPUT', 'POSTROUTING']);
const COUNTERS = /^\[(\d+):(\d+)\]$/;

export interface SaveInput {
  /** Name of the input used in messages: a command ('iptables-nft-save') or a file path. */
  source: string;
  family: NatFamily;
  /**
   * Only these tables' chains and rules are kept (the others' headers still are, empty): the
   * agent needs the nat table alone, and at 5,000 Services the parsed filter table is tens of MB.
   */
  tables?: ReadonlySet<string>;
}

export function parseIptablesSave(text: string, input: SaveInput): IptablesDump {
  const { source } = input;
  const warnings: string[] = [];
  const tables: IptablesTable[] = [];
  let table: IptablesTable | undefined;
  let declared = new Set<string>();
  const lines = text.split('\n');
  let lastLine = 0;
  let unrecognised: string | undefined;

  for (let idx = 0; idx < lines.length; idx++) {
    const lineNo = idx + 1;
    const line = lines[idx]!.replace(/\r$/, '');
    const trimmed = line.trim();
    if (trimmed === '') continue;
    lastLine = lineNo;
    if (trimmed.startsWith('#')) {
      // iptables-nft-save says so when a table holds rules it cannot express.
      if (/incompatible/i.test(trimmed)) warnings.push(lineIssue(source, lineNo, trimmed.slice(1).trim()));
      continue;
    }
    if (trimmed.startsWith('*')) {
      const name = trimmed.slice(1).trim();
      if (!/^[a-z_]+$/.test(name)) throw new NatParseError(source, lineNo, `bad table header '${trimmed}'`);
      if (table) warnings.push(lineIssue(source, lineNo, `table '${table.name}' has no COMMIT before '*${name}'`));
      if (tables.some((t) => t.name === name)) warnings.push(lineIssue(source, lineNo, `table '${name}' appears twice`));
      table = { name, chains: [], rules: [], committed: false, line: lineNo };
      tables.push(table);
      declared = new Set();
      continue;
    }
    if (trimmed === 'COMMIT') {
      if (!table) warnings.push(lineIssue(source, lineNo, 'COMMIT outside a table'));
      else table.committed = true;
      table = undefined;
      continue;
    }
    if (table && input.tables && !input.tables.has(table.name)) continue;
    if (trimmed.startsWith(':')) {
      if (!table) throw new NatParseError(source, lineNo, 'chain declared before any table header (*nat, *filter, ...)');
      const [name, policy, counters] = trimmed.slice(1).split(/\s+/);
      if (!name) {
        warnings.push(lineIssue(source, lineNo, 'chain declaration without a name'));
        continue;
      }
      const c = counters ? COUNTERS.exec(counters) : null;
      table.chains.push({
        name,
        builtin: BUILTIN_CHAINS.has(name),
        ...(policy && policy !== '-' ? { policy } : {}),
        ...(c ? { counters: { packets: Number(c[1]), bytes: Number(c[2]) } } : {}),
        line: lineNo,
      });
      declared.add(name);
      continue;
    }
    if (trimmed.startsWith('-') || trimmed.startsWith('[')) {
      if (!table) throw new NatParseError(source, lineNo, 'rule before any table header (*nat, *filter, ...)');
      parseRuleLine(trimmed, lineNo, table, declared, source, warnings);
      continue;
    }
    const issue = lineIssue(source, lineNo, `unrecognised line '${truncate(trimmed)}'`);
    unrecognised ??= issue;
    warnings.push(issue);
  }
  if (table) {
    warnings.push(lineIssue(source, lastLine, `input ends inside table '${table.name}' (no COMMIT): truncated capture?`));
  }
  if (tables.length === 0 && unrecognised) {
    throw new NatParseError(source, lastLine, `no table found; not iptables-save output (${unrecognised})`);
  }
  return { family: input.family, source, tables, warnings };
}

function parseRuleLine(
  text: string,
  lineNo: number,
  table: IptablesTable,
  declared: Set<string>,
  source: string,
  warnings: string[],
): void {
  const tok = tokenize(text);
  if (!tok.ok) {
    warnings.push(lineIssue(source, lineNo, `rule skipped: ${tok.error}`));
    return;
  }
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
  if (verb !== '-A' || !chain) {
    warnings.push(lineIssue(source, lineNo, `rule skipped: expected '-A CHAIN ...', got '${truncate(text)}'`));
    return;
  }
  const parsed = parseRuleSpec(words.slice(i + 2));
  if (!parsed.ok) {
    warnings.push(lineIssue(source, lineNo, `rule skipped: ${parsed.error}`));
    return;
  }
  if (!declared.has(chain)) warnings.push(lineIssue(source, lineNo, `rule for undeclared chain '${chain}'`));
  table.rules.push({
    table: table.name,
    chain,
    spec: specText(text),
    ...parsed.spec,
    ...(counters ? { counters } : {}),
    line: lineNo,
  });
}

/** The text after `-A CHAIN `, byte for byte. */
function specText(line: string): string {
  const m = /^(?:\[\d+:\d+\]\s+)?-A\s+\S+\s*/.exec(line);
  return m ? line.slice(m[0].length) : line;
}

function truncate(s: string): string {
  return s.length > 60 ? `${s.slice(0, 57)}...` : s;
}
