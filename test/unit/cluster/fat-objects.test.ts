// The watcher with a namespace's objects over their bounds (a fake API server speaking the real
// list/watch JSON): each is left out of the view, logged once with its kind, name, size and
// reason, and named in the view's warnings; the rest of the list is kept; the watch follows one
// that grows too large, shrinks back, or goes away.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { ClusterView } from '../../../src/cluster/types.js';
import { ClusterWatch } from '../../../src/cluster/watch.js';
import { FakeApiServer, type ResourceName } from '../../support/fake-apiserver.js';
import { until } from '../../support/wait.js';

const FIX = new URL('../../fixtures/cluster/', import.meta.url).pathname;
const BUCKET: Record<string, ResourceName> = {
  Service: 'services',
  EndpointSlice: 'endpointslices',
  Ingress: 'ingresses',
  Node: 'nodes',
};
const fixtureItems = (JSON.parse(readFileSync(`${FIX}kubectl-list.json`, 'utf8')) as { items: { kind: string }[] })
  .items;
const BLOB = 20_000;

const service = (name: string, annotations: Record<string, string> = {}) => ({
  metadata: { name, namespace: 'fat', annotations },
  spec: { type: 'ClusterIP', clusterIP: '10.96.7.7', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] },
});
const fat = (name: string) => service(name, { 'example.com/blob': 'b'.repeat(BLOB) });

const tmp = mkdtempSync(join(tmpdir(), 'clbprobe-fat-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

async function setup() {
  const api = new FakeApiServer();
  for (const item of fixtureItems) api.apply(BUCKET[item.kind]!, structuredClone(item));
  api.apply('services', fat('fat-1'));
  api.apply('services', service('slim-1'));
  api.apply('services', fat('fat-2'));
  await api.start();
  const kubeconfig = join(tmp, `kubeconfig-${Math.random().toString(36).slice(2)}`);
  writeFileSync(kubeconfig, api.kubeconfig());
  const logged: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      logged.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
      done();
    },
  });
  let view: ClusterView | undefined;
  const watch = new ClusterWatch({
    nodeName: 'node-a',
    kubeconfig,
    debounceMs: 20,
    backoffInitialMs: 40,
    backoffMaxMs: 250,
    pageSize: 2,
    log: pino(sink),
    onChange: (v) => (view = v),
  });
  watch.start();
  cleanups.push(async () => {
    await watch.stop();
    await api.stop();
  });
  const first = await watch.synced();
  const skippedLog = () => logged.filter((l) => l.msg === 'cluster object skipped: too large');
  const latest = () => view ?? first;
  return { api, watch, first, latest, skippedLog };
}

const names = (v: ClusterView) => v.services.filter((s) => s.namespace === 'fat').map((s) => s.name);
const reason = `metadata.annotations["example.com/blob"] is ${BLOB} bytes, more than the 16 KiB kept of a value`;

describe('objects over their bounds', () => {
  it('are left out of the first list, logged and named; the objects around them are kept', async () => {
    const { watch, first, skippedLog } = await setup();
    expect(names(first)).toEqual(['slim-1']);
    expect(first.services.length).toBeGreaterThan(5);
    expect(
      watch
        .skippedObjects()
        .map((s) => s.label)
        .sort(),
    ).toEqual(['Service fat/fat-1', 'Service fat/fat-2']);
    const bytes = JSON.stringify(fat('fat-1')).length;
    expect(first.warnings.filter((w) => w.includes('skipped'))).toEqual([
      expect.stringMatching(new RegExp(`^Service fat/fat-1 skipped: \\d+ bytes; ${reason.replace(/[[\]]/g, '\\$&')}$`)),
      expect.stringMatching(/^Service fat\/fat-2 skipped/),
    ]);
    expect(skippedLog()).toEqual([
      expect.objectContaining({ level: 40, source: 'cluster', kind: 'Service', object: 'fat/fat-1', reason }),
      expect.objectContaining({ object: 'fat/fat-2' }),
    ]);
    // Its size as the API server wrote it (the fake writes it with its resourceVersion and kind).
    expect(skippedLog()[0]!.bytes as number).toBeGreaterThan(bytes);
  });

  it('are followed by the watch: grown too large, shrunk back, deleted', async () => {
    const { api, watch, latest, skippedLog } = await setup();
    api.apply('services', fat('slim-1'));
    await until('slim-1 left out once fat', 5000, () => (!names(latest()).includes('slim-1') ? true : undefined), 20);
    expect(
      watch
        .skippedObjects()
        .map((s) => s.name)
        .sort(),
    ).toEqual(['fat-1', 'fat-2', 'slim-1']);
    expect(skippedLog().map((l) => l.object)).toEqual(['fat/fat-1', 'fat/fat-2', 'fat/slim-1']);

    api.apply('services', service('fat-1'));
    await until('fat-1 in the view once slim', 5000, () => (names(latest()).includes('fat-1') ? true : undefined), 20);
    api.delete('services', 'fat', 'fat-2');
    await until('fat-2 no longer skipped', 5000, () => (watch.skippedObjects().length === 1 ? true : undefined), 20);
    expect(watch.skippedObjects().map((s) => s.name)).toEqual(['slim-1']);
    const skippedWarnings = () => latest().warnings.filter((w) => w.includes('skipped'));
    await until('a view naming slim-1 alone', 5000, () => (skippedWarnings().length === 1 ? true : undefined), 20);
    expect(skippedWarnings()).toEqual([expect.stringMatching(/^Service fat\/slim-1 skipped: \d+ bytes; /)]);
    // Still skipped, so not logged again when it changes.
    api.apply('services', fat('slim-1'));
    api.apply('services', service('marker'));
    await until('the marker in the view', 5000, () => (names(latest()).includes('marker') ? true : undefined), 20);
    expect(skippedLog()).toHaveLength(3);
  });
});
