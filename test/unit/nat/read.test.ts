// readNat's failure paths that need no privileges: missing binaries and a missing namespace.
// The successful paths run against the kernel in test/lab/nat.test.ts.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readNat } from '../../../src/kernel/nat/read.js';

const savedPath = process.env.PATH;
afterEach(() => {
  process.env.PATH = savedPath;
});

describe('readNat failures', () => {
  it('names the missing binaries when none of the tools are installed', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'clbprobe-nopath-'));
    try {
      process.env.PATH = empty;
      const r = await readNat();
      expect(r.nat).toBeUndefined();
      expect(r.sources).toEqual([
        {
          source: 'nat',
          available: false,
          reason: 'iptables-nft-save not found in PATH (install the iptables/ipset package)',
          durationMs: expect.any(Number),
        },
        { source: 'ipset', available: false, reason: 'ipset save: ipset not found in PATH (install the iptables/ipset package)', durationMs: expect.any(Number) },
      ]);
    } finally {
      rmSync(empty, { recursive: true });
    }
  });

  it('says when `ip` itself is missing for a netns read', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'clbprobe-nopath-'));
    try {
      process.env.PATH = empty;
      const r = await readNat({ netns: 'cbn-nonexistent' });
      expect(r.sources[0]!.reason).toBe('iptables-nft-save: ip not found in PATH (install iproute2)');
    } finally {
      rmSync(empty, { recursive: true });
    }
  });
});
