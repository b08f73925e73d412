// Which mappings the agent pages out after start-up, and what it reports, over the map captured
// from the agent on Node 24 (test/fixtures/proc-maps) with the syscall recorded, not made.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  isStartupFileMapping,
  parseRssFileKiB,
  releaseStartupPages,
  type StartupPagesIo,
} from '../../../src/agent/startup-pages.js';
import { type ProcMaps, parseProcMaps } from '../../../src/kernel/proc-maps.js';

const captured = parseProcMaps(
  readFileSync(new URL('../../fixtures/proc-maps/agent-node24.txt', import.meta.url), 'latin1'),
);
const syscallError = (errno: number, code: string) =>
  Object.assign(new Error(`madvise(MADV_PAGEOUT): ${code}`), { errno, code });

function io(
  maps: () => ProcMaps,
  pageOut: StartupPagesIo['pageOut'] = () => undefined,
  rss = [45_000, 13_000],
): StartupPagesIo {
  let i = 0;
  return { readMaps: maps, pageOut, rssFileKiB: () => rss[i++] };
}

describe('isStartupFileMapping', () => {
  const chosen = captured.mappings.filter(isStartupFileMapping);
  it("chooses the private read-only mappings of files: node's code and constants, the libraries, the addon", () => {
    // 86 of 292, 116,670,464 bytes mapped (counted from the fixture with a Python one-liner).
    expect(chosen).toHaveLength(86);
    expect(chosen.reduce((n, m) => n + Number(m.end - m.start), 0)).toBe(116_670_464);
    expect(
      chosen
        .filter((m) => m.path.endsWith('/bin/node'))
        .map((m) => `${m.readable ? 'r' : '-'}${m.executable ? 'x' : '-'}`),
    ).toEqual(['r-', 'rx', 'rx', 'rx', 'r-', 'r-']);
    expect(chosen.some((m) => m.path.endsWith('/clbprobe.node') && m.executable)).toBe(true);
  });
  it('leaves writable, shared, anonymous and pseudo mappings alone', () => {
    expect(chosen.filter((m) => m.writable || !m.private || !m.path.startsWith('/'))).toEqual([]);
    const node = captured.mappings.find((m) => m.path.endsWith('/bin/node') && m.writable)!;
    expect(isStartupFileMapping(node)).toBe(false); // .data: an anonymous copy once written
    expect(captured.mappings.filter((m) => m.path.startsWith('/dev/zero')).some(isStartupFileMapping)).toBe(false);
    expect(captured.mappings.filter((m) => m.path === '[vdso]' || m.path === '').some(isStartupFileMapping)).toBe(
      false,
    );
  });
});

describe('releaseStartupPages', () => {
  it('pages out exactly the chosen mappings, each whole, and reports RssFile before and after', () => {
    const calls: Array<[bigint, bigint]> = [];
    const r = releaseStartupPages(
      io(
        () => captured,
        (s, l) => void calls.push([s, l]),
      ),
    );
    expect(r).toEqual({
      mappings: 86,
      mappedBytes: 116_670_464,
      rssFileKiBBefore: 45_000,
      rssFileKiBAfter: 13_000,
      errors: [],
    });
    expect(calls).toEqual(captured.mappings.filter(isStartupFileMapping).map((m) => [m.start, m.end - m.start]));
  });

  it('MADV_PAGEOUT refused (EINVAL on the first mapping, as before Linux 5.4): one clear error, no more calls', () => {
    let calls = 0;
    const r = releaseStartupPages(
      io(
        () => captured,
        () => (
          calls++,
          (() => {
            throw syscallError(22, 'EINVAL');
          })()
        ),
      ),
    );
    expect(calls).toBe(1);
    expect(r.mappings).toBe(0);
    expect(r.errors).toEqual([
      'madvise(MADV_PAGEOUT) is refused (EINVAL: a kernel before Linux 5.4, or memory locked with mlockall): start-up pages stay until memory pressure',
    ]);
    expect(r.unsupported).toBe(true);
  });

  it('one mapping refused: named in the errors, the others still paged out', () => {
    const bad = captured.mappings.filter(isStartupFileMapping)[3]!;
    const r = releaseStartupPages(
      io(
        () => captured,
        (s) => {
          if (s === bad.start) throw syscallError(12, 'ENOMEM');
        },
      ),
    );
    expect(r.mappings).toBe(85);
    expect(r.errors).toEqual([`${bad.path}: madvise(MADV_PAGEOUT): ENOMEM`]);
    expect(r).not.toHaveProperty('unsupported');
  });

  it('an unreadable map: the error, nothing paged out', () => {
    let calls = 0;
    const r = releaseStartupPages(
      io(
        () => {
          throw new Error('ENOENT: /proc/self/maps');
        },
        () => void calls++,
      ),
    );
    expect(calls).toBe(0);
    expect(r).toMatchObject({ mappings: 0, errors: ['reading /proc/self/maps: ENOENT: /proc/self/maps'] });
  });

  it("malformed lines of the map are reported, at most five by name, and the good lines' mappings still paged out", () => {
    const withBad: ProcMaps = {
      mappings: captured.mappings,
      errors: Array.from({ length: 7 }, (_, i) => `line ${i + 1}: not a mapping: "x"`),
    };
    const r = releaseStartupPages(io(() => withBad));
    expect(r.mappings).toBe(86);
    expect(r.errors).toHaveLength(6);
    expect(r.errors.at(-1)).toBe('2 more lines of /proc/self/maps unreadable');
  });

  it('RssFile unreadable: the release still happens, the figures are absent (not 0)', () => {
    const r = releaseStartupPages(io(() => captured, undefined, []));
    expect(r.mappings).toBe(86);
    expect(r).not.toHaveProperty('rssFileKiBBefore');
    expect(r).not.toHaveProperty('rssFileKiBAfter');
  });
});

describe('parseRssFileKiB', () => {
  it('reads RssFile from a real /proc/PID/status; undefined without the field', () => {
    expect(
      parseRssFileKiB(readFileSync(new URL('../../fixtures/proc-status/host-root.txt', import.meta.url), 'latin1')),
    ).toBe(1524);
    expect(parseRssFileKiB('Name:\tnode\nVmRSS:\t 100 kB\n')).toBeUndefined();
  });
});
