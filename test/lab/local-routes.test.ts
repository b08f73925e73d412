// The local-routes source and the guest-local-route finding on the real kernel: a namespace set
// up as a GCE node whose guest agent added its `local ... proto 66` routes for two internal-LB IPs
// (as google_guest_agent's addLocalRoute does), one of them also bound on kube-ipvs0 (a veth of
// that name stands in for the dummy device this kernel lacks). The live reader keeps the guest
// routes and nothing the kernel made; the compiled `clbprobe diagnose`, run in the namespace,
// reports the route for what it is and never as a kube-ipvs0 binding (no drift from it).
// Namespaces are cbad-*, removed also on failure.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Finding } from '../../src/detect/types.js';
import { localRoutes } from '../../src/source/local-routes.js';
import { isRoot, Netns } from '../support/netns.js';
import { requireBuiltCli, runCli } from '../support/run-cli.js';

const ROOT = join(import.meta.dirname, '../..');
/** The gce-guest-local-route fixture's cluster: shop/web 192.0.2.10 ipMode Proxy, shop/api 192.0.2.20 (node-a). */
const CLUSTER = join(ROOT, 'test/fixtures/bundles/gce-guest-local-route/cluster.json');

describe.skipIf(!isRoot)('local routes of a cloud guest agent (real kernel, namespace)', () => {
  let ns: Netns;
  let dir: string;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'cbad-'));
    ns = Netns.create('cbad-');
    ns.sh(
      [
        'ip link add eth0 type veth peer name kube-ipvs0',
        'ip link set eth0 up',
        'ip link set kube-ipvs0 up',
        'ip addr add 10.0.3.11/24 dev eth0',
        // The guest agent's routes, as it adds them (forwarded IPs of the instance's NIC).
        'ip route add to local 192.0.2.10/32 scope host dev eth0 proto 66',
        'ip route add to local 192.0.2.20/32 scope host dev eth0 proto 66',
        // kube-proxy (IPVS) binds the ipMode VIP address; the ipMode Proxy one it leaves alone.
        'ip addr add 192.0.2.20/32 dev kube-ipvs0',
      ].join(' && '),
    );
  });

  afterAll(() => {
    ns?.delete();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the live reader keeps the guest routes only, says unchanged when nothing changed, and follows a removal', async () => {
    const reader = localRoutes.live!({ netns: ns.path });
    const first = await reader.read();
    expect(first.state).toBe('up');
    if (first.state !== 'up') return;
    expect(first.value.routes).toEqual([
      { family: 4, dst: '192.0.2.10/32', dev: 'eth0', protocol: '66' },
      { family: 4, dst: '192.0.2.20/32', dev: 'eth0', protocol: '66' },
    ]);
    expect((await reader.read()).state).toBe('unchanged');
    ns.run('ip', 'route', 'del', 'to', 'local', '192.0.2.10/32', 'dev', 'eth0', 'proto', '66', 'scope', 'host');
    const after = await reader.read();
    expect(after.state === 'up' && after.value.routes.map((r) => r.dst)).toEqual(['192.0.2.20/32']);
    ns.run('ip', 'route', 'add', 'to', 'local', '192.0.2.10/32', 'scope', 'host', 'dev', 'eth0', 'proto', '66');
  });

  it('a namespace that does not exist: down with the reason, no throw', async () => {
    const r = await localRoutes.live!({ netns: '/var/run/netns/cbad-none' }).read();
    expect(r.state).toBe('down');
  });

  it('compiled diagnose in the namespace: the route is reported as the guest agent’s, not as a binding', () => {
    requireBuiltCli();
    const r = runCli(ns.name, ['diagnose', '--json', '--cluster-file', CLUSTER, '--node-name', 'node-a'], 60_000);
    expect(r.stdout, r.stderr).not.toBe('');
    const { findings } = JSON.parse(r.stdout) as { findings: Finding[] };
    const of = (m: string, svc: string) => findings.filter((f) => f.mechanism === m && f.service.name === svc);
    const [web] = of('guest-local-route', 'web');
    expect(web?.severity).toBe('risk');
    expect(web?.evidence).toContain('local 192.0.2.10 dev eth0 proto 66 scope host');
    expect(web?.evidence).toContain('192.0.2.10 is not bound on kube-ipvs0');
    expect(of('guest-local-route', 'api').map((f) => f.severity)).toEqual(['info']);
    // Not read as a binding: no drift for the Proxy IP ("has ipMode: Proxy but kube-proxy bound it").
    expect(of('drift', 'web')).toEqual([]);
    expect(of('hc-drop', 'web')).toEqual([]);
  }, 90_000);
});
