// Pieces of the /metrics text kept compressed, joined into one gzip stream per scrape.
// Each piece is a raw-deflate segment that ends on a byte boundary (a sync flush) and is not
// final: segments from separate compressors can be laid end to end, and only the gzip header,
// an empty final block and the trailer are written per scrape. The trailer's CRC-32 of the whole
// text is combined from the pieces' CRCs (crc32Combine), so the text itself is never needed.
// Why: at 5,000 Services the text is 5.5 MB; kept plain it would be 5.5 MB of the agent's RSS
// and go over the network as such, while Prometheus always asks for gzip (~10x smaller).
import zlib from 'node:zlib';

export interface Chunk {
  /** Raw deflate, sync-flushed, not final. */
  readonly deflated: Buffer;
  /** CRC-32 (gzip's) of the text. */
  readonly crc: number;
  /** Bytes of text. */
  readonly size: number;
}

/**
 * Level 1: on 5.7 MB of /metrics text, 32 ms and 471 KB; the default level 6 takes 46 ms for
 * 390 KB (measured on this machine). A chunk is compressed when its text changes.
 */
const LEVEL = 1;

/**
 * zlib's output buffer size. Below half of Buffer.poolSize, so the buffers are slices of Node's
 * shared pool: with the default 16 KB, each re-formatted chunk leaves a 16 KB buffer in the C heap
 * until V8's next full collection, ~6 MB after a scrape under 10k conntrack events/s (heaptrack).
 * A bigger deflated chunk comes out in several pieces, joined by zlib.
 */
const OUTPUT_PIECE = 2048;

/**
 * The text's UTF-8 bytes in one reused buffer, valid until the next call. A new Buffer per chunk
 * (~30 KB each) would stay in the C heap until V8's next full collection, like zlib's output pieces.
 */
let scratch = Buffer.allocUnsafeSlow(64 * 1024);
const SCRATCH_MAX = 1 << 20;
function utf8Of(text: string): Buffer {
  const most = text.length * 3; // a UTF-16 unit is at most 3 bytes of UTF-8 (a surrogate pair: 4 for 2)
  if (most > SCRATCH_MAX) return Buffer.from(text); // a whole family at once (rare): not kept
  if (scratch.length < most) scratch = Buffer.allocUnsafeSlow(Math.min(SCRATCH_MAX, Math.max(most, scratch.length * 2)));
  return scratch.subarray(0, scratch.write(text));
}

export function chunkOf(text: string): Chunk {
  const plain = utf8Of(text);
  if (plain.length === 0) return { deflated: Buffer.alloc(0), crc: 0, size: 0 };
  const out = zlib.deflateRawSync(plain, { level: LEVEL, finishFlush: zlib.constants.Z_SYNC_FLUSH, chunkSize: OUTPUT_PIECE });
  // zlib hands back a view into its output buffer; a chunk deflates to ~1.5 KB and is kept
  // until its samples change, so it is copied out (200 chunks as views keep 3.2 MB, as copies 0.3 MB).
  const deflated = Buffer.allocUnsafeSlow(out.length);
  out.copy(deflated);
  return { deflated, crc: crc32(plain), size: plain.length };
}

// ID1 ID2 CM=deflate FLG=0 MTIME=0 XFL=0 OS=255 (unknown): RFC 1952 2.3.
const GZIP_HEADER = Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
// A fixed-Huffman block with BFINAL set and only the end-of-block code: 10 bits, padded.
const FINAL_EMPTY_BLOCK = [0x03, 0x00];

/** The chunks as one gzip member: header, the segments as they are, an empty final block, trailer. */
export function gzipOf(chunks: readonly Chunk[]): Buffer[] {
  let crc = 0;
  let size = 0;
  const out: Buffer[] = [GZIP_HEADER];
  for (const c of chunks) {
    if (c.size === 0) continue;
    crc = crc32Combine(crc, c.crc, c.size);
    size += c.size;
    out.push(c.deflated);
  }
  const trailer = Buffer.from([...FINAL_EMPTY_BLOCK, 0, 0, 0, 0, 0, 0, 0, 0]);
  trailer.writeUInt32LE(crc >>> 0, 2);
  trailer.writeUInt32LE(size % 2 ** 32, 6); // ISIZE is the size modulo 2^32
  out.push(trailer);
  return out;
}

/**
 * The chunks' text for clients that do not take gzip, in pieces of about `pieceBytes`, made as
 * they are pulled: each piece is inflated in one synchronous call from the chunks it spans (their
 * raw deflate laid end to end is one valid stream), into a buffer of its size. Inflating each of
 * the ~400 chunks on its own cost a zlib context per chunk; gunzipping as a stream cost a
 * threadpool round trip per piece (both slower); one 5.5 MB buffer per scrape raised the RSS.
 */
export function* textPieces(chunks: readonly Chunk[], pieceBytes: number): Generator<Buffer, void, undefined> {
  let group: Buffer[] = [];
  let size = 0;
  const inflate = (): Buffer => {
    // One byte more than the text: an output buffer filled exactly makes zlib ask for another.
    const text = zlib.inflateRawSync(Buffer.concat(group), { finishFlush: zlib.constants.Z_SYNC_FLUSH, chunkSize: Math.max(size + 1, 64) });
    if (text.length !== size) throw new Error(`metrics chunks inflated to ${text.length} bytes, not ${size}`);
    group = [];
    size = 0;
    return text;
  };
  for (const c of chunks) {
    if (c.size === 0) continue;
    group.push(c.deflated);
    size += c.size;
    if (size >= pieceBytes) yield inflate();
  }
  if (size > 0) yield inflate();
}

/** Bytes of the chunks' text (the Content-Length of a plain body). */
export const textSize = (chunks: readonly Chunk[]): number => chunks.reduce((n, c) => n + c.size, 0);

// CRC-32 as gzip computes it (reflected, polynomial 0xEDB88320). zlib.crc32 is native but only
// in Node >= 20.15; the table is the fallback.
const POLY = 0xedb88320;
let table: Int32Array | undefined;

/** The table-driven CRC-32 (exported for its test: it only runs where zlib.crc32 is missing). */
export function crc32Js(b: Uint8Array): number {
  if (!table) {
    table = new Int32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ POLY : c >>> 1;
      table[n] = c;
    }
  }
  let c = -1;
  for (let i = 0; i < b.length; i++) c = (c >>> 8) ^ table[(c ^ b[i]!) & 0xff]!;
  return (c ^ -1) >>> 0;
}

const nativeCrc = (zlib as { crc32?: (data: Uint8Array, value?: number) => number }).crc32;
export const crc32 = (b: Uint8Array): number => (nativeCrc ? nativeCrc(b) : crc32Js(b)) >>> 0;

// CRCs are remainders of polynomials over GF(2) modulo P; in the reflected form bit 31 is x^0.
// Appending n bytes to A multiplies A's remainder by x^(8n), so
//   crc(A + B) = crc(A) * x^(8 len(B)) mod P  xor  crc(B)
// (the initial and final inversions of the CRC cancel out in this sum).

/** a * b mod P, both reflected. */
function mulMod(a: number, b: number): number {
  let p = 0;
  for (let m = 0x80000000; m !== 0; m >>>= 1) {
    if (a & m) p ^= b;
    b = b & 1 ? (b >>> 1) ^ POLY : b >>> 1;
  }
  return p >>> 0;
}

/** X2K[k] = x^(2^k) mod P, by squaring from x^1 (bit 30); 64 covers any length below 2^53 bytes. */
const X2K: number[] = [];
for (let k = 0, x = 1 << 30; k < 64; k++, x = mulMod(x, x)) X2K.push(x >>> 0);

/** x^(8n) mod P. */
function xPow8n(n: number): number {
  let p = 0x80000000; // x^0
  for (let k = 3; n > 0; k++, n = Math.floor(n / 2)) if (n % 2 === 1) p = mulMod(X2K[k]!, p);
  return p;
}

/** The CRC-32 of A followed by B, from crc(A), crc(B) and B's length. */
export function crc32Combine(crcA: number, crcB: number, lengthB: number): number {
  return (mulMod(xPow8n(lengthB), crcA >>> 0) ^ crcB) >>> 0;
}
