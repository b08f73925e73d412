// The source contract's one loop: every outcome of a read lands in health,
// statuses, durations, resyncs and errors the same way, whatever the source.
import { describe, expect, it } from 'vitest';
import type { ReadResult, SourceReader } from '../../../src/source/contract.js';
import { SOURCES } from '../../../src/source/list.js';
import { SourceRunner } from '../../../src/source/runner.js';

/** A reader that answers the given results in turn (or throws an Error given as one). */
function scripted(name: string, results: (ReadResult<unknown> | Error)[]): SourceReader {
  let i = 0;
  return {
    name,
    key: 'addresses',
    read: async () => {
      const r = results[i++]!;
      if (r instanceof Error) throw r;
      return r;
    },
  };
}

const header = { takenAt: 't', hostname: 'h', kernel: 'k' };

describe('SourceRunner', () => {
  it('records up, unchanged, down and recovery: health, resyncs, errors, duration, last value kept while down', async () => {
    const value = { interfaces: [] };
    const r = scripted('demo', [
      { state: 'up', value },
      { state: 'unchanged' },
      { state: 'down', reason: 'boom' },
      { state: 'down', reason: 'boom' },
      { state: 'up', value },
    ]);
    const run = new SourceRunner();
    expect((await run.read(r)).changed).toBe(true);
    expect((await run.read(r)).changed).toBe(false);
    expect(run.health.list()).toEqual([{ source: 'demo', up: true }]);
    expect((await run.read(r)).changed).toBe(true);
    // The same failure again changes nothing the diagnosis was built from.
    expect((await run.read(r)).changed).toBe(false);
    expect(run.health.list()).toEqual([{ source: 'demo', up: false }]);
    expect(run.value('demo')).toBe(value);
    expect(run.snapshot(header).sources).toEqual([
      { source: 'demo', available: false, reason: 'boom', durationMs: expect.any(Number) },
    ]);
    expect((await run.read(r)).changed).toBe(true);
    expect(run.health.resyncs.demo).toBe(5);
    expect(run.health.errors.demo).toBe(2);
    expect(run.durations.demo).toBeGreaterThanOrEqual(0);
    expect(run.snapshot(header).addresses).toBe(value);
  });

  it('turns a throw into a down source whose reason is also a warning', async () => {
    const run = new SourceRunner();
    const out = await run.read(scripted('demo', [new Error('corrupt reply')]));
    expect(out.result).toEqual({ state: 'down', reason: 'corrupt reply', warnings: ['corrupt reply'] });
    expect(run.health.reasonOf('demo')).toBe('corrupt reply');
    expect(run.health.errors.demo).toBe(1);
  });

  it('an absent source drops its value, counts nothing and has no up series; the same absence again is no change', async () => {
    const run = new SourceRunner();
    const r = scripted('demo', [
      { state: 'up', value: { interfaces: [] } },
      { state: 'absent', reason: 'no IPVS' },
      { state: 'absent', reason: 'no IPVS' },
    ]);
    await run.read(r);
    expect((await run.read(r)).changed).toBe(true);
    expect((await run.read(r)).changed).toBe(false);
    expect(run.value('demo')).toBeUndefined();
    expect(run.health.list()).toEqual([]);
    expect(run.health.errors.demo).toBeUndefined();
    expect(run.snapshot(header)).not.toHaveProperty('addresses');
    expect(run.snapshot(header).sources[0]).toMatchObject({ available: false, notPresent: true, reason: 'no IPVS' });
  });

  it('lists statuses in the order of the readers, with the parts a source reports after it', async () => {
    const run = new SourceRunner();
    const slow: SourceReader = {
      name: 'a',
      read: () => new Promise((res) => setTimeout(() => res({ state: 'up', value: 1 }), 20)),
    };
    const fast: SourceReader = {
      name: 'b',
      read: () => ({ state: 'up', value: 2, parts: [{ source: 'b-part', available: false, reason: 'x' }] }),
    };
    await run.readAll([slow, fast]);
    expect(run.statusList().map((s) => s.source)).toEqual(['a', 'b', 'b-part']);
  });
});

describe('SOURCES', () => {
  it('names each source once, and each can be read live or from a bundle', () => {
    const names = SOURCES.map((s) => s.name);
    expect(new Set(names).size).toBe(names.length);
    for (const s of SOURCES) expect(Boolean(s.live || s.fromBundle), s.name).toBe(true);
    // A live reader carries its definition's name and key, so statuses and snapshot fields agree.
    for (const s of SOURCES.filter((d) => d.live)) {
      const r = s.live!({});
      expect([r.name, r.key]).toEqual([s.name, s.key]);
    }
  });
});
