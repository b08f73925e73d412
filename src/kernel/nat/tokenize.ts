// Splits one save-output line into words the way iptables-restore and
// ipset restore do: whitespace separates, double quotes group, and inside
// quotes a backslash escapes '"' and '\' (iptables-save writes comments as
// "a \"quoted\" word").

export interface Token {
  text: string;
  /** Whether any part of the word was quoted; quoted words are always values, never options. */
  quoted: boolean;
}

export type TokenizeResult = { ok: true; tokens: Token[] } | { ok: false; error: string };

export function tokenize(line: string): TokenizeResult {
  const tokens: Token[] = [];
  let i = 0;
  const n = line.length;
  while (i < n) {
    while (i < n && isSpace(line[i]!)) i++;
    if (i >= n) break;
    let text = '';
    let quoted = false;
    while (i < n && !isSpace(line[i]!)) {
      const c = line[i]!;
      if (c !== '"') {
        text += c;
        i++;
        continue;
      }
      quoted = true;
      const open = i;
      i++;
      for (;;) {
        if (i >= n) return { ok: false, error: `unterminated quote starting at column ${open + 1}` };
        const q = line[i]!;
        if (q === '"') {
          i++;
          break;
        }
        if (q === '\\' && (line[i + 1] === '"' || line[i + 1] === '\\')) {
          text += line[i + 1];
          i += 2;
          continue;
        }
        text += q;
        i++;
      }
    }
    tokens.push({ text, quoted });
  }
  return { ok: true, tokens };
}

function isSpace(c: string): boolean {
  return c === ' ' || c === '\t';
}
