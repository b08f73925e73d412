// Splits concatenated JSON documents and reports line and column of a syntax error, which JSON.parse does not.

export class JsonSyntaxError extends Error {
  constructor(
    readonly offset: number,
    readonly line: number,
    readonly column: number,
    readonly reason: string,
  ) {
    super(`line ${line}, column ${column}: ${reason}`);
    this.name = 'JsonSyntaxError';
  }
}

/** Parses every top-level JSON value in `text`, in order. Throws JsonSyntaxError. */
export function parseJsonDocuments(text: string): unknown[] {
  const s = text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  // Fast path: one well-formed document is parsed natively.
  try {
    return [JSON.parse(s)];
  } catch {
    // Several documents, or a broken one: scan to find out which.
  }
  const docs: unknown[] = [];
  let i = skipWs(s, 0);
  while (i < s.length) {
    const end = scanValue(s, i);
    docs.push(JSON.parse(s.slice(i, end)));
    i = skipWs(s, end);
  }
  if (docs.length === 0) throw syntaxError(s, 0, 'no JSON document (the input is empty)');
  return docs;
}

function syntaxError(s: string, offset: number, reason: string): JsonSyntaxError {
  let line = 1;
  let lineStart = 0;
  for (let k = s.indexOf('\n'); k !== -1 && k < offset; k = s.indexOf('\n', k + 1)) {
    line++;
    lineStart = k + 1;
  }
  return new JsonSyntaxError(offset, line, offset - lineStart + 1, reason);
}

function describe(s: string, i: number): string {
  return i >= s.length ? 'end of input' : JSON.stringify(s[i]);
}

function skipWs(s: string, i: number): number {
  while (i < s.length) {
    const c = s.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    i++;
  }
  return i;
}

const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;

/** Offset just past the JSON value starting at `i` (iterative: deep nesting can't overflow the stack). */
function scanValue(s: string, i: number): number {
  const open: string[] = [];
  for (;;) {
    // Expecting a value.
    i = skipWs(s, i);
    const c = s[i];
    if (c === '{' || c === '[') {
      i = skipWs(s, i + 1);
      if (s[i] === (c === '{' ? '}' : ']')) {
        i++;
      } else {
        open.push(c);
        if (c === '{') i = scanKey(s, i);
        continue;
      }
    } else if (c === '"') {
      i = scanString(s, i);
    } else if (c === '-' || (c !== undefined && c >= '0' && c <= '9')) {
      NUMBER.lastIndex = i;
      if (!NUMBER.test(s)) throw syntaxError(s, i, `bad number`);
      i = NUMBER.lastIndex;
    } else {
      const lit = ['true', 'false', 'null'].find((w) => s.startsWith(w, i));
      if (!lit) throw syntaxError(s, i, `unexpected ${describe(s, i)}, expected a value`);
      i += lit.length;
    }
    // After a value: close containers until one wants another element.
    for (;;) {
      const top = open[open.length - 1];
      if (top === undefined) return i;
      const close = top === '{' ? '}' : ']';
      i = skipWs(s, i);
      if (s[i] === close) {
        open.pop();
        i++;
      } else if (s[i] === ',') {
        i = top === '{' ? scanKey(s, skipWs(s, i + 1)) : i + 1;
        break;
      } else {
        throw syntaxError(s, i, `unexpected ${describe(s, i)}, expected ',' or '${close}'`);
      }
    }
  }
}

/** `"key" :` → offset after the colon. */
function scanKey(s: string, i: number): number {
  if (s[i] !== '"') throw syntaxError(s, i, `unexpected ${describe(s, i)}, expected a double-quoted property name`);
  i = skipWs(s, scanString(s, i));
  if (s[i] !== ':') throw syntaxError(s, i, `unexpected ${describe(s, i)}, expected ':'`);
  return i + 1;
}

function scanString(s: string, start: number): number {
  for (let i = start + 1; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x22) return i + 1;
    if (c < 0x20) throw syntaxError(s, i, 'control character inside a string (unterminated string?)');
    if (c === 0x5c) {
      const e = s[i + 1];
      if (e === 'u') {
        if (!/^[0-9a-fA-F]{4}$/.test(s.slice(i + 2, i + 6))) throw syntaxError(s, i, 'bad \\u escape');
        i += 5;
      } else if (e !== undefined && '"\\/bfnrt'.includes(e)) {
        i++;
      } else {
        throw syntaxError(s, i, `bad escape ${describe(s, i + 1)}`);
      }
    }
  }
  throw syntaxError(s, start, 'unterminated string');
}
