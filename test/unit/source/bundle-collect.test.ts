// collect's cluster.json from a fake API server, read back by readBundle as diagnose --from does.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listCluster } from '../../../src/source/bundle-collect.js';
import { readBundle } from '../../../src/source/bundle-read.js';
import { FakeApiServer } from '../../support/fake-apiserver.js';

describe('collect cluster.json, read back', () => {
  const server = new FakeApiServer();
  let tmp: string;
  beforeAll(async () => {
    await server.start();
    server.apply('services', { metadata: { name: 'web', namespace: 'shop' }, spec: { type: 'ClusterIP', ports: [] } });
    tmp = mkdtempSync(join(tmpdir(), 'cbb-collect-'));
    writeFileSync(join(tmp, 'kubeconfig'), server.kubeconfig());
  });
  afterAll(async () => {
    await server.stop();
    rmSync(tmp, { recursive: true, force: true });
  });

  /** listCluster into a fresh bundle directory with a manifest of that one step, then readBundle. */
  async function collectAndRead() {
    const out = mkdtempSync(join(tmp, 'bundle-'));
    const entry = await listCluster(out, join(tmp, 'kubeconfig'));
    const manifest = { format: 'clbprobe-bundle/1', nodeName: 'node-a', hostname: 'n', startedAt: 'x', endedAt: 'x' };
    writeFileSync(join(out, 'manifest.json'), JSON.stringify({ ...manifest, files: [entry] }));
    return { entry, read: readBundle(out), out };
  }

  it('every kind listed: the cluster source is up', async () => {
    const { entry, read } = await collectAndRead();
    expect(entry.incomplete).toBeUndefined();
    expect(read.node.sources.find((s) => s.source === 'cluster')).toMatchObject({ available: true });
  });

  it('EndpointSlices not listed: marked incomplete, and the cluster source read back is down naming them', async () => {
    server.forbid('endpointslices');
    try {
      const { entry, read, out } = await collectAndRead();
      expect(entry).toMatchObject({ file: 'cluster.json', incomplete: true });
      const cluster = read.node.sources.find((s) => s.source === 'cluster');
      expect(cluster?.available).toBe(false);
      expect(cluster?.reason).toMatch(new RegExp(`^${out}/cluster\\.json is incomplete: EndpointSlice list: .*403`));
      expect(read.warnings).toContainEqual(expect.stringMatching(/cluster\.json: written by .*which partly failed/));
    } finally {
      server.forbid('endpointslices', false);
    }
  });
});
