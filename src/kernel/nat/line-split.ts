// A command's output cut into lines as the pipe hands it over (a line split across chunks gets a buffer of its own,
// never written again), so no reader holds it whole; a line past the bound is an error, not a growing buffer.

/** Receives each line (without its '\n'): bytes [start, end) of buf, which is never written again. */
export type LineFn = (buf: Buffer, start: number, end: number, lineNo: number, terminated: boolean) => void;

export class LineTooLong extends Error {
  constructor(
    readonly lineNo: number,
    readonly maxLineBytes: number,
  ) {
    super(`line ${lineNo} is longer than ${maxLineBytes} bytes (the bound on one line of output)`);
    this.name = 'LineTooLong';
  }
}

const EMPTY = Buffer.alloc(0);

export class LineSplitter {
  /** The line begun in an earlier chunk; a new buffer for each such line (a few per chunk at most). */
  private carry: Buffer = EMPTY;
  private carried = 0;
  private lineNo = 1;
  private ended = false;

  constructor(
    private readonly maxLineBytes: number,
    private readonly onLine: LineFn,
  ) {}

  /** The next chunk of output. Throws LineTooLong when a line passes the bound. */
  push(chunk: Buffer): void {
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(0x0a, start);
      if (nl < 0) break;
      if (this.carried > 0) {
        this.append(chunk, start, nl);
        const line = this.carry;
        const n = this.carried;
        this.carry = EMPTY;
        this.carried = 0;
        this.onLine(line, 0, n, this.lineNo++, true);
      } else {
        if (nl - start > this.maxLineBytes) throw new LineTooLong(this.lineNo, this.maxLineBytes);
        this.onLine(chunk, start, nl, this.lineNo++, true);
      }
      start = nl + 1;
    }
    if (start < chunk.length) this.append(chunk, start, chunk.length);
  }

  /** The output is over: its last line, if it has no '\n' (an empty one after a final '\n', as eachLine gives it). */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    const line = this.carry;
    const n = this.carried;
    this.carry = EMPTY;
    this.carried = 0;
    this.onLine(line, 0, n, this.lineNo, false);
  }

  private append(buf: Buffer, start: number, end: number): void {
    const need = this.carried + (end - start);
    if (need > this.maxLineBytes) throw new LineTooLong(this.lineNo, this.maxLineBytes);
    if (need > this.carry.length) {
      const bigger = Buffer.allocUnsafe(Math.min(this.maxLineBytes, Math.max(need, this.carry.length * 2, 512)));
      this.carry.copy(bigger, 0, 0, this.carried);
      this.carry = bigger;
    }
    buf.copy(this.carry, this.carried, start, end);
    this.carried = need;
  }
}
