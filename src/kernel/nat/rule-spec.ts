// The words of one rule (after `-A CHAIN`) as matches and a target; an unknown match module is kept: every
// `--option` after `-m NAME` belongs to NAME, with the words up to the next option as its values.

import type { Token } from './tokenize.js';
import type { IptablesRule, MatchOption, RuleMatch } from './types.js';

type ParsedSpec = Pick<IptablesRule, 'matches' | 'target' | 'goto' | 'targetArgs' | 'comment'>;

/** Base (non-module) options: the canonical spelling, its long ones, and how many values it takes. */
const BASE_SPELLINGS: [string, string[], number][] = [
  ['-s', ['--source', '--src'], 1],
  ['-d', ['--destination', '--dst'], 1],
  ['-p', ['--protocol'], 1],
  ['-i', ['--in-interface'], 1],
  ['-o', ['--out-interface'], 1],
  ['-f', ['--fragment'], 0],
];
const BASE_OPTIONS = new Map(
  BASE_SPELLINGS.flatMap(([canonical, long, arity]) =>
    [canonical, ...long].map((w) => [w, { canonical, arity }] as const),
  ),
);

export type SpecResult = { ok: true; spec: ParsedSpec } | { ok: false; error: string };

export function parseRuleSpec(tokens: Token[]): SpecResult {
  const base: RuleMatch = { module: '', options: [] };
  const matches: RuleMatch[] = [base];
  let current = base;
  let negate = false;
  let i = 0;
  const isOption = (token: Token | undefined): boolean =>
    !!token && !token.quoted && token.text.startsWith('-') && token.text.length > 1;
  const parsed = (rest: Pick<ParsedSpec, 'target' | 'goto' | 'targetArgs'>): SpecResult => ({
    ok: true,
    spec: withComment({ matches: matches.filter((m) => m.module !== '' || m.options.length > 0), ...rest }),
  });

  while (i < tokens.length) {
    const tok = tokens[i]!;
    const word = tok.text;
    if (!tok.quoted && word === '!') {
      negate = true;
      i++;
      continue;
    }
    if (!tok.quoted && (word === '-m' || word === '--match')) {
      const name = tokens[i + 1];
      if (!name) return { ok: false, error: `'${word}' without a module name` };
      current = { module: name.text, options: [] };
      matches.push(current);
      i += 2;
      continue;
    }
    if (!tok.quoted && (word === '-j' || word === '--jump' || word === '-g' || word === '--goto')) {
      const target = tokens[i + 1];
      if (!target) return { ok: false, error: `'${word}' without a target` };
      if (negate) return { ok: false, error: `'!' before '${word}'` };
      return parsed({
        target: target.text,
        goto: word === '-g' || word === '--goto',
        targetArgs: tokens.slice(i + 2).map((t) => t.text),
      });
    }
    const baseOpt = tok.quoted ? undefined : BASE_OPTIONS.get(word);
    if (baseOpt) {
      const values = tokens.slice(i + 1, i + 1 + baseOpt.arity);
      if (values.length < baseOpt.arity) return { ok: false, error: `'${word}' without a value` };
      base.options.push({ name: baseOpt.canonical, negated: negate, values: values.map((t) => t.text) });
      negate = false;
      i += 1 + baseOpt.arity;
      continue;
    }
    if (isOption(tok)) {
      const opt: MatchOption = { name: word, negated: negate, values: [] };
      negate = false;
      i++;
      while (i < tokens.length && !isOption(tokens[i]) && !(tokens[i]!.text === '!' && !tokens[i]!.quoted)) {
        opt.values.push(tokens[i]!.text);
        i++;
      }
      current.options.push(opt);
      continue;
    }
    return { ok: false, error: `unexpected word '${word}'` };
  }
  if (negate) return { ok: false, error: `'!' at the end of the rule` };
  return parsed({ goto: false, targetArgs: [] });
}

function withComment(spec: ParsedSpec): ParsedSpec {
  for (const m of spec.matches) {
    if (m.module !== 'comment') continue;
    const c = m.options.find((o) => o.name === '--comment');
    if (c) return { ...spec, comment: c.values.join(' ') };
  }
  return spec;
}

/** All options named `name` (e.g. '-s', '--dport') of a rule's matches, optionally of one module. */
export function findOptions(matches: RuleMatch[], name: string, module?: string): MatchOption[] {
  const out: MatchOption[] = [];
  for (const m of matches) {
    if (module !== undefined && m.module !== module) continue;
    for (const o of m.options) if (o.name === name) out.push(o);
  }
  return out;
}
