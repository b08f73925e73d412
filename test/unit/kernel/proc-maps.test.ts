// /proc/PID/maps, as captured from the agent on the image's Node 24 (bench/agent.ts, 5,000
// Services): every line read, pseudo-paths and paths with spaces kept, addresses past 2^53 exact.
import { readFileSync, readlinkSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseProcMaps, readProcMaps } from '../../../src/kernel/proc-maps.js';

const captured = readFileSync(new URL('../../fixtures/proc-maps/agent-node24.txt', import.meta.url), 'latin1');

describe('parseProcMaps', () => {
  it('reads every mapping of a real process', () => {
    const { mappings, errors } = parseProcMaps(captured);
    expect(errors).toEqual([]);
    expect(mappings).toHaveLength(292);
    expect(mappings[2]).toEqual({
      start: 0x74a000n,
      end: 0x3044000n,
      readable: true,
      writable: false,
      executable: true,
      private: true,
      offset: 0x34a000n,
      inode: 1983922,
      path: '/var/cache/clbprobe-image/node-24.21.0/bin/node',
    });
    // A shared mapping of a deleted file: the path keeps its space and suffix.
    const zero = mappings.find((m) => m.start === 0x7faaa2a74000n)!;
    expect(zero).toMatchObject({ path: '/dev/zero (deleted)', private: false, writable: true });
    // Anonymous mappings have no path; pseudo-files keep their name.
    expect(mappings.filter((m) => m.path === '')).toHaveLength(170);
    expect(mappings.find((m) => m.path === '[vdso]')).toMatchObject({ executable: true, inode: 0 });
    // [vsyscall] sits at 0xffffffffff600000, past Number's exact integers.
    expect(mappings.at(-1)).toMatchObject({
      start: 0xffffffffff600000n,
      end: 0xffffffffff601000n,
      path: '[vsyscall]',
      readable: false,
    });
  });

  it('a line cut short is an error; the lines before it are kept', () => {
    const cut = `${captured.slice(0, captured.indexOf('\n', 1000) + 1)}7faaa2a21000-7faaa2a2`;
    const { mappings, errors } = parseProcMaps(cut);
    expect(mappings.length).toBe(cut.split('\n').length - 1);
    expect(errors).toEqual([expect.stringMatching(/^line \d+: not a mapping: "7faaa2a21000-7faaa2a2"$/)]);
  });

  it('one malformed line is reported by number and the rest are still read', () => {
    const lines = captured.split('\n');
    lines[4] = 'garbage that is not a mapping';
    lines[9] = '00500000-00400000 r--p 00000000 fe:00 1 /backwards';
    const { mappings, errors } = parseProcMaps(lines.join('\n'));
    expect(mappings).toHaveLength(290);
    expect(errors).toEqual([
      'line 5: not a mapping: "garbage that is not a mapping"',
      expect.stringMatching(/^line 10: not a mapping: "00500000-00400000/),
    ]);
  });

  it('empty input: no mappings, no errors', () => {
    expect(parseProcMaps('')).toEqual({ mappings: [], errors: [] });
  });
});

describe('readProcMaps', () => {
  it("reads this process's own map: its executable is among the file mappings", () => {
    const { mappings, errors } = readProcMaps('self');
    expect(errors).toEqual([]);
    const exe = readlinkSync('/proc/self/exe');
    expect(mappings.filter((m) => m.path === exe && m.executable)).not.toEqual([]);
  });
});
