// collect --cluster-file: the file is copied into the bundle only up to the cluster file
// reader's bound; a path to a device that never ends (/dev/zero) is refused at the bound
// instead of filling the disk.
import { existsSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { copyCluster } from '../../../src/source/bundle-collect.js';

const out = mkdtempSync(join(tmpdir(), 'cbhd-copy-cluster-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));
const FIX = new URL('../../fixtures/cluster/kubectl-list.json', import.meta.url).pathname;

describe('collect: the --cluster-file copy', () => {
  it('copies a cluster file as it is', () => {
    const e = copyCluster(FIX, out);
    expect(e).toMatchObject({ file: 'cluster.json', command: `copy of --cluster-file ${FIX}` });
    expect(readFileSync(join(out, 'cluster.json'), 'utf8')).toBe(readFileSync(FIX, 'utf8'));
  });

  it('refuses a file over 64 MiB without copying it', () => {
    const big = join(out, 'big.json');
    writeFileSync(big, '');
    truncateSync(big, (64 << 20) + 1);
    const dest = mkdtempSync(join(out, 'bundle-'));
    const e = copyCluster(big, dest);
    expect(e).toEqual({
      command: `copy of --cluster-file ${big}`,
      durationMs: expect.any(Number),
      error: `cannot copy: cluster file ${big} is larger than 64 MiB, the most clbprobe reads of it`,
    });
    expect(existsSync(join(dest, 'cluster.json'))).toBe(false);
    rmSync(big);
  });

  it('refuses /dev/zero at 64 MiB, naming the file and the bound', () => {
    const e = copyCluster('/dev/zero', out);
    expect(e.file).toBeUndefined();
    expect(e.error).toBe('cannot copy: cluster file /dev/zero is larger than 64 MiB, the most clbprobe reads of it');
  });
});
