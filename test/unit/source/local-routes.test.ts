// The local-routes source's parser on `ip -j route show table local` captured in a namespace
// (test/fixtures/routes/README.md): only the `local` routes no address made are kept.
import { chmodSync, copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readBundle } from '../../../src/source/bundle-read.js';
import { localRoutes, localRoutesOf } from '../../../src/source/local-routes.js';

const FX = join(import.meta.dirname, '../../fixtures/routes');
const read = (f: string): string => readFileSync(join(FX, f), 'utf8');

describe('localRoutesOf', () => {
  it('keeps the guest agent routes (proto 66) and drops the kernel ones, kube-ipvs0 included', () => {
    const v4 = localRoutesOf(read('gce-guest-agent.local.v4.json'), 'ip-route-local.json', 4);
    expect(v4.warnings).toEqual([]);
    expect(v4.routes).toEqual([
      { family: 4, dst: '192.0.2.10/32', dev: 'eth0', protocol: '66' },
      { family: 4, dst: '192.0.2.20/32', dev: 'eth0', protocol: '66' },
    ]);
    const v6 = localRoutesOf(read('gce-guest-agent.local.v6.json'), 'ip6-route-local.json', 6);
    expect(v6.routes).toEqual([{ family: 6, dst: 'fd20:1:2::100/128', dev: 'eth0', protocol: '66' }]);
  });

  it('truncated output: a clear error naming the file', () => {
    const text = read('gce-guest-agent.local.v4.json');
    expect(() => localRoutesOf(text.slice(0, Math.floor(text.length * 0.7)), 'ip-route-local.json', 4)).toThrow(
      /ip-route-local\.json:1: not valid JSON/,
    );
  });

  it('a malformed item is skipped with a warning, the rest kept', () => {
    const items = JSON.parse(read('gce-guest-agent.local.v4.json')) as Record<string, unknown>[];
    items.splice(1, 0, { type: 'local', dst: '300.1.2.3', protocol: '66' }, { type: 'local', protocol: 66 });
    const r = localRoutesOf(JSON.stringify(items), 'ip-route-local.json', 4);
    expect(r.routes.map((x) => x.dst)).toEqual(['192.0.2.10/32', '192.0.2.20/32']);
    expect(r.warnings).toHaveLength(2);
    expect(r.warnings[0]).toMatch(
      /^ip-route-local\.json: item \[1\]: "dst" "300\.1\.2\.3" is not a prefix; route skipped$/,
    );
  });
});

describe('local-routes in a bundle', () => {
  it('reads ip-route-local.json and ip6-route-local.json into the node snapshot; without them the source is down with the reason', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cbad-bundle-'));
    try {
      copyFileSync(join(FX, 'gce-guest-agent.local.v4.json'), join(dir, 'ip-route-local.json'));
      copyFileSync(join(FX, 'gce-guest-agent.local.v6.json'), join(dir, 'ip6-route-local.json'));
      const r = readBundle(dir);
      expect(r.node.localRoutes?.routes.map((x) => x.dst)).toEqual([
        '192.0.2.10/32',
        '192.0.2.20/32',
        'fd20:1:2::100/128',
      ]);
      expect(r.node.sources.find((s) => s.source === 'local-routes')?.available).toBe(true);
      rmSync(join(dir, 'ip-route-local.json'));
      rmSync(join(dir, 'ip6-route-local.json'));
      const none = readBundle(dir);
      expect(none.node.localRoutes).toBeUndefined();
      expect(none.node.sources.find((s) => s.source === 'local-routes')?.reason).toMatch(
        /^ip-route-local\.json not in the bundle/,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('local-routes, live', () => {
  it('a privilege failure keeps its "permission denied" start, so snapshot counts it among the denied sources', async () => {
    // A stand-in `ip` first on PATH that answers as iproute2 does without CAP_NET_ADMIN.
    const dir = mkdtempSync(join(tmpdir(), 'clbprobe-fake-ip-'));
    const saved = process.env.PATH;
    try {
      writeFileSync(join(dir, 'ip'), '#!/bin/sh\necho "RTNETLINK answers: Operation not permitted" >&2\nexit 2\n');
      chmodSync(join(dir, 'ip'), 0o755);
      process.env.PATH = `${dir}:${saved}`;
      const r = await localRoutes.live!({}).read();
      expect(r.state).toBe('down');
      expect(r.state === 'down' && r.reason).toMatch(
        /^permission denied \(needs root or CAP_NET_ADMIN\): ip: RTNETLINK/,
      );
    } finally {
      process.env.PATH = saved;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
