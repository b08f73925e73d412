// The digest of what the save commands said, without what changes on every run, so an unchanged re-read parses
// nothing; computed line by line or over a whole output, with the same result.
import { createHash, type Hash } from 'node:crypto';
import { eachLine } from './lines.js';

const NL = Buffer.from('\n');

/**
 * Hashes a save output without the "# Generated/Completed on <time>" lines and chain counters, which older
 * iptables printed with real values that move with traffic.
 */
export class SaveHash {
  private readonly h: Hash = createHash('sha256');
  private buf: Buffer | undefined;
  private from = 0;
  private to = 0;

  line(buf: Buffer, start: number, end: number, terminated: boolean): void {
    const first = buf[start];
    let keep = end;
    if (first === 0x23 /* # */) keep = start;
    else if (first === 0x3a /* : */) {
      const c = chainCounters(buf, start, end);
      if (c >= 0) keep = c;
    }
    this.add(buf, start, keep);
    // A line carried over from an earlier chunk has a buffer of its own, without the '\n'.
    if (terminated) {
      if (buf[end] === 0x0a) this.add(buf, end, end + 1);
      else this.add(NL, 0, 1);
    }
  }

  /** The output's digest (hex); the hash is done with. */
  digest(): string {
    this.flush();
    return this.h.digest('hex');
  }

  private add(buf: Buffer, start: number, end: number): void {
    if (end <= start) return;
    if (buf === this.buf && start === this.to) {
      this.to = end;
      return;
    }
    this.flush();
    this.buf = buf;
    this.from = start;
    this.to = end;
  }

  private flush(): void {
    if (this.buf && this.to > this.from) this.h.update(this.buf.subarray(this.from, this.to));
    this.buf = undefined;
  }
}

/** Where " [n:m]" starts when the line is ":NAME POLICY [n:m]"; else -1. */
function chainCounters(buf: Buffer, start: number, end: number): number {
  if (buf[end - 1] !== 0x5d /* ] */) return -1;
  const open = buf.lastIndexOf(0x5b /* [ */, end - 1);
  if (open <= start + 1 || buf[open - 1] !== 0x20) return -1;
  return /^:\S+ \S+ \[\d+:\d+\]$/.test(buf.toString('latin1', start, end)) ? open - 1 : -1;
}

/** SaveHash over an output held whole. */
export function outputDigest(out: string | Uint8Array): string {
  const buf = typeof out === 'string' ? Buffer.from(out) : Buffer.from(out.buffer, out.byteOffset, out.byteLength);
  const h = new SaveHash();
  eachLine(buf, (start, end) => h.line(buf, start, end, end < buf.length));
  return h.digest();
}

export type DigestPart = { ok: true; digest: string } | { ok: false; reason: string };

/** The digest of all the commands' results, in order (which command said what counts). */
export function combineDigests(parts: readonly DigestPart[]): string {
  const h = createHash('sha256');
  for (const p of parts) {
    if (p.ok) h.update('ok\0').update(p.digest);
    else h.update('failed\0').update(p.reason);
    h.update('\0');
  }
  return h.digest('hex');
}
