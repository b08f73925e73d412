// The save-output lines the NAT facts depend on (nat table, structure lines, named filter chains), kept in chunks
// never copied again as the output streams by, so NatRules reads them with the whole output's line numbers.

import { isRuleOfChains } from './nat-rules.js';

/** A line's start is chunk * CHUNK + offset; every line (and its '\n') lies in one chunk. */
const CHUNK = 1 << 20;
/** iptables-restore's own whitespace, as String#trim sees it in one byte (CR included). */
const ASCII_SPACE = new Set([0x09, 0x0b, 0x0c, 0x0d, 0x20]);
const INCOMPATIBLE = /incompatible/i;

export class NatLineStore {
  private readonly chunks: Buffer[] = [];
  private readonly fill: number[] = [];
  private used = CHUNK;
  /** Line number of each kept line, in order. */
  private lineNos = new Int32Array(1024);
  private lines = 0;
  /** The last line that is not blank, kept or not (SaveLines' end-of-input messages name it). */
  lastLine = 0;
  /** The table the output is in, as SaveLines follows it: set by '*name', cleared by COMMIT. */
  private table: string | undefined;
  /** Lines of one buffer waiting to be copied together: [from, to) of pending. */
  private pending: Buffer | undefined;
  private from = 0;
  private to = 0;
  private ended = false;

  /** The longest `-A CHAIN ` prefix of the filter chains kept. */
  private readonly filterPrefixBytes: number;

  /** `filterChains`: the filter table's chains whose rules are kept (NatRules.filterRules). */
  constructor(
    private readonly maxLineBytes: number,
    private readonly filterChains: readonly string[],
  ) {
    this.filterPrefixBytes = Math.max(0, ...filterChains.map((c) => c.length + 4));
    if (maxLineBytes + 1 > CHUNK) throw new Error(`line bound ${maxLineBytes} does not fit a chunk of ${CHUNK} bytes`);
  }

  /** One line of the output (line-split.ts's LineFn, bytes [start, end) of buf). */
  line(buf: Buffer, start: number, end: number, lineNo: number, terminated: boolean): void {
    let i = start;
    while (i < end && ASCII_SPACE.has(buf[i]!)) i++;
    if (i === end) return;
    const first = buf[i];
    if (first === 0x3a /* : */ || first === 0x2d /* - */ || first === 0x5b /* [ */) {
      // A chain or a rule: of the nat table, or outside any table (an error SaveLines reports).
      this.lastLine = lineNo;
      if (this.table === undefined || this.table === 'nat') this.keep(buf, start, end, lineNo, terminated);
      else if (
        this.table === 'filter' &&
        first === 0x2d &&
        isRuleOfChains(buf.toString('latin1', i, Math.min(end, i + this.filterPrefixBytes)), this.filterChains)
      ) {
        this.keep(buf, start, end, lineNo, terminated);
      }
      return;
    }
    // Anything else is rare: read as SaveLines reads it.
    const trimmed = buf.toString('utf8', start, end).trim();
    if (trimmed === '') return;
    this.lastLine = lineNo;
    if (trimmed.charCodeAt(0) === 0x23 /* # */) {
      if (INCOMPATIBLE.test(trimmed)) this.keep(buf, start, end, lineNo, terminated);
      return;
    }
    if (trimmed.charCodeAt(0) === 0x2a /* * */) this.table = trimmed.slice(1).trim();
    else if (trimmed === 'COMMIT') this.table = undefined;
    this.keep(buf, start, end, lineNo, terminated);
  }

  end(): void {
    this.flush();
    this.ended = true;
  }

  get bytes(): number {
    return this.chunks.length * CHUNK;
  }

  /** Calls fn for each kept line: its position (for text()) and its line number in the output. */
  each(fn: (start: number, end: number, lineNo: number) => void): void {
    if (!this.ended) throw new Error('NatLineStore read before its end()');
    let k = 0;
    for (let c = 0; c < this.chunks.length; c++) {
      const chunk = this.chunks[c]!;
      const limit = this.fill[c]!;
      let at = 0;
      while (at < limit) {
        const nl = chunk.indexOf(0x0a, at);
        if (nl < 0 || nl >= limit) break;
        fn(c * CHUNK + at, c * CHUNK + nl, this.lineNos[k++]!);
        at = nl + 1;
      }
    }
  }

  /** The text of a line each() gave. */
  text(start: number, end: number): string {
    const c = Math.floor(start / CHUNK);
    return this.chunks[c]!.toString('utf8', start - c * CHUNK, end - c * CHUNK);
  }

  private keep(buf: Buffer, start: number, end: number, lineNo: number, terminated: boolean): void {
    if (end - start > this.maxLineBytes) throw new Error(`line ${lineNo} is longer than ${this.maxLineBytes} bytes`);
    if (this.lines === this.lineNos.length) {
      const more = new Int32Array(this.lineNos.length * 2);
      more.set(this.lineNos);
      this.lineNos = more;
    }
    this.lineNos[this.lines++] = lineNo;
    // The line and its '\n' straight from the pipe's chunk, in one copy with the lines before it.
    if (terminated && buf[end] === 0x0a) {
      if (buf === this.pending && start === this.to && this.to + 1 - this.from + (end - start) <= CHUNK - this.used) {
        this.to = end + 1;
        return;
      }
      this.flush();
      this.pending = buf;
      this.from = start;
      this.to = end + 1;
      return;
    }
    // A line from a buffer of its own (carried over between chunks), or the last one without '\n'.
    this.flush();
    const room = this.room(end - start + 1);
    buf.copy(room.chunk, room.at, start, end);
    room.chunk[room.at + end - start] = 0x0a;
  }

  private flush(): void {
    if (this.pending && this.to > this.from) {
      const room = this.room(this.to - this.from);
      this.pending.copy(room.chunk, room.at, this.from, this.to);
    }
    this.pending = undefined;
  }

  /** n bytes at the end of the last chunk, or of a new one. */
  private room(n: number): { chunk: Buffer; at: number } {
    if (this.used + n > CHUNK) {
      if ((this.chunks.length + 1) * CHUNK > 2 ** 31) throw new Error('more than 2 GiB of nat table lines');
      this.chunks.push(Buffer.allocUnsafeSlow(CHUNK));
      this.fill.push(0);
      this.used = 0;
    }
    const at = this.used;
    this.used += n;
    this.fill[this.fill.length - 1] = this.used;
    return { chunk: this.chunks.at(-1)!, at };
  }
}
