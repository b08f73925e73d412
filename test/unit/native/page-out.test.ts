// The real syscall: after releaseStartupPages, a private read-only file mapping's pages have left
// this process's RSS, and what runs again is read back in. The mapping is a fresh copy of the
// addon, so no other process maps its pages (the kernel leaves pages others map alone).
import { closeSync, copyFileSync, fsyncSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { processStartupPagesIo, releaseStartupPages } from '../../../src/agent/startup-pages.js';
import { projectRoot } from '../../../src/native/addon.js';

/** Per mapping of `path` (perms -> resident file pages in KiB: Rss - Anonymous), from /proc/self/smaps. */
function fileResidentKiB(path: string): Map<string, number> {
  const out = new Map<string, number>();
  let cur: string | undefined;
  let rss = 0;
  for (const line of readFileSync('/proc/self/smaps', 'latin1').split('\n')) {
    const head = /^[0-9a-f]+-([0-9a-f]+) (\S+) \S+ \S+ \d+\s*(.*)$/.exec(line);
    if (head) {
      cur = head[3] === path ? `${head[1]} ${head[2]}` : undefined;
      continue;
    }
    if (!cur) continue;
    const kb = /^(Rss|Anonymous):\s+(\d+) kB/.exec(line);
    if (kb?.[1] === 'Rss') rss = Number(kb[2]);
    if (kb?.[1] === 'Anonymous') out.set(cur, rss - Number(kb[2]));
  }
  return out;
}
const sum = (m: Map<string, number>, keep: (k: string) => boolean) =>
  [...m].filter(([k]) => keep(k)).reduce((n, [, v]) => n + v, 0);
const readOnly = (k: string) => !k.split(' ')[1]!.includes('w');

describe('releaseStartupPages on this process', () => {
  const dir = mkdtempSync(join(tmpdir(), 'clbprobe-pageout-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("pages out a file mapping's resident pages; calling into it reads them back", () => {
    const copy = join(dir, 'copy.node');
    copyFileSync(join(projectRoot(), 'build', 'Release', 'clbprobe.node'), copy);
    const fd = openSync(copy, 'r+');
    fsyncSync(fd); // clean pages: the kernel reclaims those without writing them back
    closeSync(fd);
    const mod = { exports: {} as { pageOut(start: bigint, length: bigint): void } };
    process.dlopen(mod, copy);
    mod.exports.pageOut(0n, 0n); // an empty range: only the call's code runs
    const before = fileResidentKiB(copy);
    expect(sum(before, readOnly), JSON.stringify([...before])).toBeGreaterThan(0);

    const r = releaseStartupPages(processStartupPagesIo());
    expect(r.errors).toEqual([]);
    expect(r.mappings).toBeGreaterThan(0);
    // RssFile in /proc/self/status lags (the kernel syncs per-thread RSS counters lazily); smaps below is exact.
    expect(r.rssFileKiBAfter).toBeLessThanOrEqual(r.rssFileKiBBefore!);
    const after = fileResidentKiB(copy);
    expect(sum(after, readOnly), JSON.stringify([...after])).toBe(0);

    // Code that runs again is read back in, as the agent's steady state does.
    mod.exports.pageOut(0n, 0n);
    const again = fileResidentKiB(copy);
    expect(
      sum(again, (k) => k.endsWith('r-xp')),
      JSON.stringify([...again]),
    ).toBeGreaterThan(0);
  });
});
