// Parsers of `ipset save` (what the reader runs) and `ipset list` (found in support bundles) into one IpsetDump;
// one bad line is a warning, input that is no ipset output at all is a NatParseError.
import { lineIssue, NatParseError, truncate } from './errors.js';
import { eachLineText } from './lines.js';
import { type Token, tokenize } from './tokenize.js';
import type { IpsetDump, IpsetSet } from './types.js';

/** Header and element options that are flags (no value). */
const FLAGS = new Set(['counters', 'comment', 'skbinfo', 'forceadd', 'nomatch', 'before', 'after']);

/** `ipset save` output as text or as the bytes the command printed (read a line at a time). */
export function parseIpsetSave(text: string | Buffer, source: string): IpsetDump {
  const sets: IpsetSet[] = [];
  const byName = new Map<string, IpsetSet>();
  const warnings: string[] = [];
  let unrecognised = 0;
  let lastLine = 0;
  const each = (raw: string, lineNo: number): void => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    lastLine = lineNo;
    const tok = tokenize(line);
    if (!tok.ok) {
      warnings.push(lineIssue(source, lineNo, `line skipped: ${tok.error}`));
      return;
    }
    const [verb, name, arg, ...rest] = tok.tokens.map((t) => t.text);
    if (verb === 'create' && name && arg) {
      if (byName.has(name)) warnings.push(lineIssue(source, lineNo, `set '${name}' created twice`));
      const set = newSet(name, arg, rest, lineNo);
      sets.push(set);
      byName.set(name, set);
    } else if (verb === 'add' && name && arg) {
      const set = byName.get(name);
      if (!set) warnings.push(lineIssue(source, lineNo, `element for set '${name}' that was not created`));
      else set.members.push({ entry: arg, options: readOptions(tok.tokens.slice(3)) });
    } else {
      unrecognised++;
      warnings.push(lineIssue(source, lineNo, `unrecognised line '${truncate(line)}'`));
    }
  };
  if (typeof text === 'string') for (const [i, l] of text.split('\n').entries()) each(l, i + 1);
  else eachLineText(text, each);
  if (sets.length === 0 && unrecognised > 0) {
    throw new NatParseError(source, lastLine, `no 'create' line found; not 'ipset save' output (${warnings[0]})`);
  }
  return { source, sets, warnings };
}

export function parseIpsetList(text: string, source: string): IpsetDump {
  const sets: IpsetSet[] = [];
  const warnings: string[] = [];
  let set: IpsetSet | undefined;
  let expected: number | undefined;
  let inMembers = false;
  let lastLine = 0;
  const finish = (): void => {
    if (set && expected !== undefined && set.members.length !== expected) {
      warnings.push(
        lineIssue(source, lastLine, `set '${set.name}' lists ${set.members.length} of ${expected} entries: truncated?`),
      );
    }
    if (set && !inMembers) warnings.push(lineIssue(source, set.line, `set '${set.name}' has no 'Members:' line`));
  };
  const lines = text.split('\n');
  for (let idx = 0; idx < lines.length; idx++) {
    const lineNo = idx + 1;
    const line = lines[idx]!.replace(/\r$/, '');
    if (line.trim() === '') continue;
    const field = /^([A-Z][A-Za-z ]*):\s*(.*)$/.exec(line);
    if (field && field[1] === 'Name') {
      finish();
      set = { name: field[2]!.trim(), type: '', options: {}, members: [], line: lineNo };
      sets.push(set);
      expected = undefined;
      inMembers = false;
      lastLine = lineNo;
      continue;
    }
    if (!set) throw new NatParseError(source, lineNo, "expected 'Name: SET' first; not 'ipset list' output");
    lastLine = lineNo;
    if (inMembers) {
      const tok = tokenize(line.trim());
      if (!tok.ok) {
        warnings.push(lineIssue(source, lineNo, `member skipped: ${tok.error}`));
        continue;
      }
      const [entry, ...opts] = tok.tokens;
      set.members.push({ entry: entry!.text, options: readOptions(opts) });
      continue;
    }
    if (!field) {
      warnings.push(lineIssue(source, lineNo, `unrecognised line in set '${set.name}'`));
      continue;
    }
    const [, key, value] = field;
    if (key === 'Type') set.type = value!.trim();
    else if (key === 'Header') Object.assign(set, headerFields(value!.trim().split(/\s+/)));
    else if (key === 'Number of entries') expected = Number(value);
    else if (key === 'Members') inMembers = true;
  }
  finish();
  for (const s of sets) if (!s.type) warnings.push(lineIssue(source, s.line, `set '${s.name}' has no 'Type:' line`));
  return { source, sets, warnings };
}

function newSet(name: string, type: string, header: string[], line: number): IpsetSet {
  return { name, type, ...headerFields(header), members: [], line };
}

function headerFields(words: string[]): Pick<IpsetSet, 'family' | 'options'> {
  const options = readOptions(words.map((text) => ({ text, quoted: false })));
  const { family, ...rest } = options;
  return {
    ...(family === 'inet' || family === 'inet6' ? { family } : {}),
    options: rest,
  };
}

function readOptions(tokens: Token[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i < tokens.length; i++) {
    const key = tokens[i]!.text;
    if (FLAGS.has(key) && (key !== 'comment' || tokens[i + 1] === undefined || !tokens[i + 1]!.quoted)) {
      out[key] = '';
      continue;
    }
    out[key] = tokens[i + 1]?.text ?? '';
    i++;
  }
  return out;
}
