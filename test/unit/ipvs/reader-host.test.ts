// readIpvs on this machine's own kernel (read-only). The CI kernel has no IPVS:
// the reader must say so in its status instead of failing.
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { readIpvs } from '../../../src/kernel/ipvs/reader.js';

describe('readIpvs on the host kernel', () => {
  it('reports IPVS as unavailable when the kernel has no IPVS, available otherwise', async () => {
    const { status, snapshot } = await readIpvs();
    expect(status.source).toBe('ipvs');
    expect(status.durationMs).toBeGreaterThanOrEqual(0);
    if (existsSync('/proc/net/ip_vs')) {
      expect(status.available).toBe(true);
      expect(snapshot).toBeDefined();
    } else {
      expect(status).toMatchObject({
        available: false,
        reason: expect.stringMatching(/family "IPVS" is not registered/),
      });
      expect(snapshot).toBeUndefined();
    }
  });
});
