// Splits one save-output line into words as iptables-restore and ipset restore do: whitespace separates, double
// quotes group, and inside quotes a backslash escapes '"' and '\'.

export interface Token {
  text: string;
  /** Whether any part of the word was quoted; quoted words are always values, never options. */
  quoted: boolean;
}

export type TokenizeResult = { ok: true; tokens: Token[] } | { ok: false; error: string };

const WORD_END = /[ \t"]/g;
const QUOTED_SPECIAL = /["\\]/g;

export function tokenize(line: string): TokenizeResult {
  const tokens: Token[] = [];
  const n = line.length;
  let i = 0;
  while (i < n) {
    while (i < n && (line[i] === ' ' || line[i] === '\t')) i++;
    if (i >= n) break;
    let text = '';
    let quoted = false;
    while (i < n && line[i] !== ' ' && line[i] !== '\t') {
      if (line[i] !== '"') {
        WORD_END.lastIndex = i;
        const m = WORD_END.exec(line);
        const end = m ? m.index : n;
        text += line.slice(i, end);
        i = end;
        continue;
      }
      quoted = true;
      const open = i;
      i++;
      for (;;) {
        QUOTED_SPECIAL.lastIndex = i;
        const m = QUOTED_SPECIAL.exec(line);
        if (!m) return { ok: false, error: `unterminated quote starting at column ${open + 1}` };
        text += line.slice(i, m.index);
        i = m.index;
        if (line[i] === '"') {
          i++;
          break;
        }
        // A backslash escapes a quote or a backslash; any other backslash is kept as is.
        const next = line[i + 1];
        if (next === '"' || next === '\\') {
          text += next;
          i += 2;
        } else {
          text += '\\';
          i++;
        }
      }
    }
    tokens.push({ text, quoted });
  }
  return { ok: true, tokens };
}
