// The streaming reader of API answers (src/cluster/json-reduce.ts). With the ANY shape it must
// agree with JSON.parse on every input: whole, cut into pieces anywhere, cut short, or broken
// by one byte. With a shape it keeps only the named fields, and an object over its bounds
// becomes a SkippedObject naming it, without losing the objects after it.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  ANY,
  each,
  fields,
  idValue,
  JsonReducer,
  JsonStreamError,
  mapOf,
  type ReduceLimits,
  reduceText,
  type Shape,
  SkippedObject,
  unit,
  VALUE,
} from '../../../src/cluster/json-reduce.js';

const FIX = new URL('../../fixtures/cluster/', import.meta.url).pathname;
const LIMITS: ReduceLimits = { maxValueBytes: 1 << 20, maxUnitBytes: 1 << 30 };

/** The value of `bytes` read in pieces cut at `cuts`, or the error thrown. */
function readPieces(
  bytes: Buffer,
  cuts: number[],
  shape: Shape = ANY,
  limits = LIMITS,
): { value?: unknown; error?: Error } {
  let value: unknown;
  const r = new JsonReducer(shape, limits, (v) => (value = v));
  try {
    let from = 0;
    for (const cut of [...cuts, bytes.length]) {
      r.write(bytes.subarray(from, cut));
      from = cut;
    }
    r.end();
    return { value };
  } catch (e) {
    return { error: e as Error };
  }
}

/** JSON.parse's answer for the same bytes. */
function parsed(bytes: Buffer): { value?: unknown; error?: Error } {
  try {
    return { value: JSON.parse(bytes.toString('utf8')) };
  } catch (e) {
    return { error: e as Error };
  }
}

/** A small seeded PRNG, so a failure names an input that can be made again. */
function prng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const TRICKY = Buffer.from(
  `${JSON.stringify({
    s: 'é ü 日本 😀 \u0000 \u001f " \\ / \b\f\n\r\t',
    n: [0, -0, 1.5e-7, -12, 1e21, 123456789012345],
    l: [true, false, null, [], {}, [[]], { a: { b: {} } }],
    k: { 'a"b': 1, 'x\\y': 2, '': 3, é: 4 },
  }).replace('"n"', ' \n\t"n" ')}\r\n`,
);
const CORPUS = [readFileSync(`${FIX}kubectl-list.json`), readFileSync(`${FIX}malformed-objects.json`), TRICKY];

describe('with the ANY shape, the same as JSON.parse', () => {
  it('for every document, whole and in pieces of every size from 1 to 97 bytes', () => {
    for (const doc of CORPUS) {
      const want = JSON.parse(doc.toString('utf8'));
      for (let size = 1; size < 98; size++) {
        const cuts = Array.from({ length: Math.ceil(doc.length / size) - 1 }, (_, i) => (i + 1) * size);
        expect(readPieces(doc, cuts).value, `pieces of ${size}`).toEqual(want);
      }
    }
  });

  it('for two pieces cut at every byte (a multi-byte character or an escape split in two)', () => {
    const want = JSON.parse(TRICKY.toString('utf8'));
    for (let cut = 0; cut <= TRICKY.length; cut++)
      expect(readPieces(TRICKY, [cut]).value, `cut at ${cut}`).toEqual(want);
  });

  it('for every truncation: cut short, it fails where JSON.parse fails, never with a partial value', () => {
    for (const doc of [TRICKY, readFileSync(`${FIX}kubectl-list.json`).subarray(0, 4000)]) {
      for (let len = 0; len < doc.length; len++) {
        const prefix = doc.subarray(0, len);
        const want = parsed(prefix);
        const got = readPieces(prefix, [len >> 1]);
        expect(got.error !== undefined, `prefix of ${len} bytes: ${got.error?.message}`).toBe(want.error !== undefined);
        if (got.error) expect(got.error).toBeInstanceOf(JsonStreamError);
        else expect(got.value).toEqual(want.value);
      }
    }
  });

  it('for 3,000 one-byte corruptions: the same verdict, the same value when it parses', () => {
    const next = prng(36);
    const alphabet = Buffer.from('{}[]:,"\\ 0123456789-+.eEtrufalsn\n\tx\u0001');
    for (let n = 0; n < 3000; n++) {
      const doc = Buffer.from(CORPUS[n % CORPUS.length]!);
      const at = Math.floor(next() * doc.length);
      const op = next();
      const byte = alphabet[Math.floor(next() * alphabet.length)]!;
      const bad =
        op < 0.4
          ? Buffer.concat([doc.subarray(0, at), doc.subarray(at + 1)])
          : op < 0.7
            ? Buffer.concat([doc.subarray(0, at), Buffer.of(byte), doc.subarray(at)])
            : ((doc[at] = byte), doc);
      const want = parsed(bad);
      const got = readPieces(bad, [Math.floor(next() * bad.length)]);
      const what = `corruption ${n} at byte ${at}: ${JSON.stringify(bad.subarray(Math.max(0, at - 20), at + 20).toString())}`;
      expect(
        got.error !== undefined,
        `${what}: ${got.error?.message ?? 'no error'} / ${want.error?.message ?? 'no error'}`,
      ).toBe(want.error !== undefined);
      if (got.error) expect(got.error).toBeInstanceOf(JsonStreamError);
      else expect(JSON.stringify(got.value), what).toBe(JSON.stringify(want.value));
    }
  });

  it('says where the text went wrong', () => {
    expect(readPieces(Buffer.from('{"a": [1, 2,, 3]}'), []).error?.message).toBe(
      "not JSON at byte 12: expected a value, got ','",
    );
    expect(readPieces(Buffer.from('{"a" 1}'), []).error?.message).toBe("not JSON at byte 5: expected ':', got '1'");
    expect(readPieces(Buffer.from('{"a": tru}'), []).error?.message).toBe('not JSON at byte 9: "tru" is not a value');
    expect(readPieces(Buffer.from('{"a": "b"'), []).error?.message).toBe(
      'not JSON: the text ends inside a value at byte 9 (cut short?)',
    );
    expect(readPieces(Buffer.from('{} {}'), []).error?.message).toBe(
      "not JSON at byte 3: unexpected '{' after the JSON value",
    );
    expect(readPieces(Buffer.from('  '), []).error?.message).toBe('not JSON: no value at all');
    expect(readPieces(Buffer.from('['.repeat(300)), []).error?.message).toBe(
      'not JSON at byte 256: nested deeper than 256',
    );
  });

  it('keeps "__proto__" as an own field, as JSON.parse does', () => {
    const v = reduceText('{"__proto__": {"polluted": true}}', ANY, LIMITS) as Record<string, unknown>;
    expect(Object.getPrototypeOf(v)).toBe(Object.prototype);
    expect(Object.keys(v)).toEqual(['__proto__']);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});

describe('a sequence (a watch stream)', () => {
  it('hands over each top-level value as it completes, in pieces of any size', () => {
    const events = [{ type: 'ADDED', object: { a: 1 } }, { type: 'BOOKMARK' }, { type: 'DELETED', object: { b: [2] } }];
    const text = Buffer.from(`${events.map((e) => JSON.stringify(e)).join('\n')}\n`);
    for (const size of [1, 5, 17, text.length]) {
      const got: unknown[] = [];
      const r = new JsonReducer(ANY, LIMITS, (v) => got.push(v), true);
      for (let i = 0; i < text.length; i += size) r.write(text.subarray(i, i + size));
      r.end();
      expect(got).toEqual(events);
    }
  });

  it('a value that never ends is cut at maxUnitBytes, not held', () => {
    const got: unknown[] = [];
    const r = new JsonReducer(ANY, { maxValueBytes: 1 << 20, maxUnitBytes: 1 << 20 }, (v) => got.push(v), true);
    r.write(Buffer.from('{"type":"ADDED"}\n{"type":"ADDED","object":"'));
    const chunk = Buffer.alloc(64 << 10, 0x61);
    let written = 0;
    expect(() => {
      for (; written < 64 << 20; written += chunk.length) r.write(chunk);
    }).toThrow('the value at byte 17 is longer than 1 MiB');
    expect(written).toBeLessThan(2 << 20);
    expect(got).toEqual([{ type: 'ADDED' }]);
  });
});

const SERVICE = unit(
  'Service',
  4096,
  fields({
    metadata: fields({
      name: idValue('name'),
      namespace: idValue('namespace'),
      resourceVersion: idValue('resourceVersion'),
      annotations: mapOf(VALUE),
    }),
    spec: fields({ ports: each(fields({ port: VALUE })), type: VALUE }),
  }),
);
const LIST = fields({ metadata: fields({ resourceVersion: VALUE }), items: each(SERVICE) });
const SMALL: ReduceLimits = { maxValueBytes: 64, maxUnitBytes: 1 << 20 };
const svc = (name: string, extra: Record<string, unknown> = {}, annotations: Record<string, string> = {}) => ({
  metadata: {
    name,
    namespace: 'ns',
    resourceVersion: '7',
    uid: 'u-1',
    annotations,
    managedFields: [{ manager: 'kubectl', fieldsV1: { 'f:spec': {} } }],
  },
  spec: { type: 'ClusterIP', selector: { app: name }, ports: [{ port: 80, name: 'http' }] },
  status: {},
  ...extra,
});
const listOf = (...items: unknown[]) =>
  JSON.stringify({ kind: 'ServiceList', metadata: { resourceVersion: '9', continue: '' }, items });

describe('with a shape', () => {
  it('keeps only the named fields, in pieces of any size', () => {
    const text = Buffer.from(listOf(svc('a', {}, { 'x/y': 'z' })));
    for (const size of [1, 3, 64, text.length]) {
      const cuts = Array.from({ length: Math.ceil(text.length / size) - 1 }, (_, i) => (i + 1) * size);
      expect(readPieces(text, cuts, LIST, SMALL).value).toEqual({
        metadata: { resourceVersion: '9' },
        items: [
          {
            metadata: { name: 'a', namespace: 'ns', resourceVersion: '7', annotations: { 'x/y': 'z' } },
            spec: { type: 'ClusterIP', ports: [{ port: 80 }] },
          },
        ],
      });
    }
  });

  it('keeps a value of the wrong kind as an empty one of its own kind, so the parser names the field', () => {
    const v = reduceText(
      listOf({ metadata: { name: ['x'], annotations: [] }, spec: { ports: { port: 80 }, type: { a: 1 } } }),
      LIST,
      SMALL,
    ) as { items: unknown[] };
    expect(v.items).toEqual([{ metadata: { name: [], annotations: [] }, spec: { ports: {}, type: {} } }]);
  });

  it('skips an object with a value over the cap: its name, size and why; the objects after it are kept', () => {
    const fat = svc('fat', {}, { 'example.com/blob': 'b'.repeat(5000) });
    const text = listOf(svc('a'), fat, svc('c'));
    const v = reduceText(text, LIST, SMALL) as { items: unknown[] };
    expect(v.items).toHaveLength(3);
    expect((v.items[0] as { metadata: { name: string } }).metadata.name).toBe('a');
    expect((v.items[2] as { metadata: { name: string } }).metadata.name).toBe('c');
    const skipped = v.items[1] as SkippedObject;
    expect(skipped).toBeInstanceOf(SkippedObject);
    expect(skipped).toMatchObject({
      kind: 'Service',
      namespace: 'ns',
      name: 'fat',
      resourceVersion: '7',
      bytes: JSON.stringify(fat).length,
    });
    expect(skipped.reason).toBe(
      'metadata.annotations["example.com/blob"] is 5000 bytes, more than the 64 bytes kept of a value',
    );
    expect(skipped.label).toBe('Service ns/fat');
  });

  it('names a skipped object whose name comes after what made it too large', () => {
    const text = `{"metadata":{"resourceVersion":"1"},"items":[{"metadata":{"annotations":{"k":"${'v'.repeat(100)}"},"namespace":"ns","name":"late"}}]}`;
    const [skipped] = (reduceText(text, LIST, SMALL) as { items: SkippedObject[] }).items;
    expect(skipped).toMatchObject({
      name: 'late',
      namespace: 'ns',
      reason: 'metadata.annotations.k is 100 bytes, more than the 64 bytes kept of a value',
    });
  });

  it('skips an object whose kept fields are over its budget (many small values), naming the budget', () => {
    const ports = Array.from({ length: 300 }, (_, i) => ({ port: i + 1 }));
    const v = reduceText(listOf(svc('many', { spec: { ports } }), svc('b')), LIST, SMALL) as { items: unknown[] };
    expect(v.items[0]).toMatchObject({ name: 'many', reason: 'the fields read of it are more than 4 KiB' });
    expect(v.items[1]).not.toBeInstanceOf(SkippedObject);
  });

  it('skips a map key over the cap rather than dropping the key', () => {
    const v = reduceText(listOf(svc('k', {}, { ['k'.repeat(100)]: 'v' })), LIST, SMALL) as { items: SkippedObject[] };
    expect(v.items[0]!.reason).toBe('metadata.annotations has a key of 100 bytes, more than the 64 bytes kept of one');
  });

  it('fails on a kept value over the cap outside any object, and on an object past maxUnitBytes', () => {
    expect(() => reduceText(`{"metadata":{"resourceVersion":"${'9'.repeat(100)}"},"items":[]}`, LIST, SMALL)).toThrow(
      'a string of 100 bytes at byte 132, more than the 64 bytes kept of a value',
    );
    const huge = listOf(svc('a'), svc('huge', { pad: 'p'.repeat(5000) }));
    expect(() => reduceText(huge, LIST, { maxValueBytes: 64, maxUnitBytes: 4096 })).toThrow(
      /^Service ns\/huge at byte \d+ is longer than 4 KiB: not an object the API server stores$/,
    );
  });

  it('still reports a malformed object inside a skipped one as not JSON', () => {
    const text = listOf(svc('a')).replace('"managedFields":[', '"managedFields":[,');
    expect(() => reduceText(text, LIST, SMALL)).toThrow(/^not JSON at byte \d+: expected a value, got ','$/);
  });
});
