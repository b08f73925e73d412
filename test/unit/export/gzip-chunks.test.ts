import zlib from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { chunkOf, crc32, crc32Combine, crc32Js, gzipOf, textPieces, textSize } from '../../../src/export/gzip-chunks.js';

// A deterministic pseudo-random text generator: metric-like lines and arbitrary bytes.
function texts(seed: number, n: number): string[] {
  let s = seed;
  const rnd = () => ((s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32);
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const lines = Math.floor(rnd() * 300);
    let t = '';
    for (let l = 0; l < lines; l++) t += `clbprobe_x_total{namespace="ns${Math.floor(rnd() * 50)}",service="s${l}",port="80"} ${Math.floor(rnd() * 1e6)}\n`;
    if (rnd() < 0.3) t += String.fromCharCode(...Array.from({ length: 50 }, () => Math.floor(rnd() * 0x2000)));
    out.push(t);
  }
  return out;
}

describe('gzip chunks', () => {
  it('lays independently deflated chunks end to end as one gzip stream that gunzip accepts (CRC and size checked)', () => {
    for (const seed of [1, 2, 3]) {
      const parts = texts(seed, 40);
      const chunks = parts.map(chunkOf);
      const expected = Buffer.from(parts.join(''));
      // gunzip verifies the trailer's CRC-32 and ISIZE: a wrong combined CRC fails here.
      expect(zlib.gunzipSync(Buffer.concat(gzipOf(chunks))).equals(expected)).toBe(true);
      expect(textSize(chunks)).toBe(expected.length);
      const compressed = gzipOf(chunks).reduce((n, b) => n + b.length, 0);
      expect(compressed).toBeLessThan(expected.length / 3);
    }
  });

  it('keeps only the deflated bytes, not the whole output buffer of the compressor', () => {
    for (const text of texts(4, 10)) {
      const c = chunkOf(text);
      expect(c.deflated.buffer.byteLength).toBe(c.deflated.length);
    }
  });

  it('keeps non-ASCII text, chunks that deflate to several output pieces, and a chunk bigger than the reused buffer', () => {
    const accents = 'service="caf\u00e9-\u00fc\u00df",note="\u{1f600}\u{1f680}" 1\n'.repeat(50);
    // Random bytes as hex: poorly compressible, so the output spans many of zlib's 2 KB pieces.
    const noisy = Array.from({ length: 4000 }, (_, i) => `x{v="${((i * 2654435761) >>> 0).toString(16)}"} ${i}\n`).join('');
    const huge = 'clbprobe_x{service="a"} 1\n'.repeat(60_000); // > 1 MB of buffer needed
    const parts = [accents, noisy, huge, accents];
    const chunks = parts.map(chunkOf);
    const expected = Buffer.from(parts.join(''));
    expect(zlib.gunzipSync(Buffer.concat(gzipOf(chunks))).equals(expected)).toBe(true);
    expect(chunks.map((c) => c.size)).toEqual(parts.map((p) => Buffer.byteLength(p)));
  });

  it('gives the text in pieces of about the asked size, each inflated from the chunks it spans', () => {
    const parts = texts(7, 200);
    const chunks = [chunkOf(''), ...parts.map(chunkOf), chunkOf('')];
    const expected = Buffer.from(parts.join(''));
    const pieceBytes = Math.ceil(expected.length / 5);
    const pieces = [...textPieces(chunks, pieceBytes)];
    expect(Buffer.concat(pieces).equals(expected)).toBe(true);
    expect(pieces.length).toBeGreaterThanOrEqual(4);
    expect(pieces.length).toBeLessThanOrEqual(6);
    const biggest = Math.max(...parts.map((p) => Buffer.byteLength(p)));
    for (const p of pieces.slice(0, -1)) expect(p.length).toBeGreaterThanOrEqual(pieceBytes);
    for (const p of pieces) expect(p.length).toBeLessThan(pieceBytes + biggest);
    expect([...textPieces([chunkOf(''), chunkOf('')], 1024)]).toEqual([]);
    expect(() => [...textPieces([{ ...chunkOf('a 1\n'), size: 5 }], 1024)]).toThrow(/inflated to 4 bytes, not 5/);
  });

  it('handles no chunks, empty chunks, and a single chunk', () => {
    expect(zlib.gunzipSync(Buffer.concat(gzipOf([]))).length).toBe(0);
    const c = [chunkOf(''), chunkOf('a 1\n'), chunkOf(''), chunkOf('b 2\n')];
    expect(zlib.gunzipSync(Buffer.concat(gzipOf(c))).toString()).toBe('a 1\nb 2\n');
    expect(zlib.gunzipSync(Buffer.concat(gzipOf([chunkOf('only\n')]))).toString()).toBe('only\n');
    expect(textSize([chunkOf(''), chunkOf('')])).toBe(0);
  });

  it('combines CRCs as the CRC of the concatenation', () => {
    const a = Buffer.from('The quick brown fox ');
    const b = Buffer.from('jumps over the lazy dog');
    expect(crc32(Buffer.from('123456789'))).toBe(0xcbf43926); // the CRC-32 check value
    expect(crc32Js(Buffer.from('123456789'))).toBe(0xcbf43926);
    expect(crc32Js(Buffer.concat([a, b]))).toBe(crc32(Buffer.concat([a, b])));
    expect(crc32Combine(crc32(a), crc32(b), b.length)).toBe(crc32(Buffer.concat([a, b])));
    expect(crc32Combine(crc32(a), 0, 0)).toBe(crc32(a));
    expect(crc32Combine(0, crc32(b), b.length)).toBe(crc32(b));
    const big = Buffer.alloc(300_000, 7);
    expect(crc32Combine(crc32(a), crc32(big), big.length)).toBe(crc32(Buffer.concat([a, big])));
  });
});
