// Line-by-line access to output kept as bytes, so only the line at hand becomes a string; a newline byte never
// occurs inside a UTF-8 sequence, so decoding line by line gives the same text as decoding the whole.

/** Calls fn for each line (without its '\n'), 1-based, with its byte range. */
export function eachLine(buf: Uint8Array, fn: (start: number, end: number, lineNo: number) => void): void {
  const b = Buffer.isBuffer(buf) ? buf : Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
  let start = 0;
  let lineNo = 1;
  for (;;) {
    const nl = b.indexOf(0x0a, start);
    const end = nl < 0 ? b.length : nl;
    fn(start, end, lineNo);
    if (nl < 0) return;
    start = nl + 1;
    lineNo++;
  }
}

/** Calls fn with each line's text, 1-based (the text equals `buf.toString().split('\n')[lineNo - 1]`). */
export function eachLineText(buf: Buffer, fn: (line: string, lineNo: number) => void): void {
  eachLine(buf, (start, end, lineNo) => fn(buf.toString('utf8', start, end), lineNo));
}

/** Whether `line` may hold `needle` once quotes and escapes are read, so a reader can skip lines unparsed. */
export function mayContain(line: string, needle: string): boolean {
  if (line.includes(needle)) return true;
  if (needle === '' || !line.includes('"')) return false;
  const first = needle[0]!;
  for (let i = line.indexOf(first); i >= 0; i = line.indexOf(first, i + 1)) {
    let j = 1;
    let k = i + 1;
    while (j < needle.length && k < line.length) {
      const c = line.charCodeAt(k);
      if (c === needle.charCodeAt(j)) {
        j++;
        k++;
      } else if (c === 0x22 /* " */ || c === 0x5c /* \ */) k++;
      else break;
    }
    if (j === needle.length) return true;
  }
  return false;
}
