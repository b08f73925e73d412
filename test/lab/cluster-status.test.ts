// The cluster's answer against a real kube-apiserver v1.20.2 (test/support/kube-control-plane.ts).
// The fix as a command: every fixture case is diagnosed, its Services are created in the API server
// as the fixture's cluster.json has them, and each fix's printed command is run by a shell with
// `--dry-run=server`: the API server must accept the patch and the object it returns must carry
// the change. Every remedy kind must be met at least once (each field exists in 1.20).
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { diagnose } from '../../src/detect/index.js';
import type { FixChange, FixKind } from '../../src/detect/fixes.js';
import { renderFixCommands } from '../../src/detect/render.js';
import { binary, startControlPlane, type ControlPlane } from '../support/kube-control-plane.js';
import { BUNDLES, loadCase } from '../unit/detect/fixture-bundle.js';
import { isRoot } from '../support/netns.js';

type Obj = Record<string, any>;

const KINDS: FixKind[] = ['etp-cluster', 'tencent-prevent-loopback', 'aws-preserve-client-ip-off', 'source-ranges-add-pods'];

/** The fixture's Service as a user would create it: no server-owned fields, no addresses this API server would refuse. */
function creatable(svc: Obj): Obj {
  const { uid, resourceVersion, creationTimestamp, managedFields, ...metadata } = svc.metadata;
  const { clusterIP, clusterIPs, healthCheckNodePort, ...spec } = svc.spec;
  spec.ports = spec.ports.map(({ nodePort, ...p }: Obj) => p);
  return { apiVersion: 'v1', kind: 'Service', metadata, spec };
}

/** What the patched object must show for each kind. */
function changed(fix: FixChange, obj: Obj): boolean {
  switch (fix.kind) {
    case 'etp-cluster':
      return obj.spec.externalTrafficPolicy === 'Cluster';
    case 'tencent-prevent-loopback':
      return obj.metadata.annotations?.['service.cloud.tencent.com/prevent-loopback'] === 'true';
    case 'aws-preserve-client-ip-off':
      return /(^|,)preserve_client_ip\.enabled=false$/.test(obj.metadata.annotations?.['service.beta.kubernetes.io/aws-load-balancer-target-group-attributes'] ?? '');
    case 'source-ranges-add-pods':
      return fix.patch.type === 'json' && fix.patch.body.every((op) => (obj.spec.loadBalancerSourceRanges ?? []).includes(op.value));
  }
}

describe.skipIf(!isRoot)('fix commands against a real kube-apiserver v1.20.2', () => {
  let cp: ControlPlane;
  beforeAll(async () => {
    cp = await startControlPlane();
  }, 120_000);
  afterAll(async () => {
    await cp?.stop();
  });

  it('every remedy kind prints a command the API server accepts, and the object it returns has the change', async () => {
    const seen = new Set<FixKind>();
    const cases = readdirSync(BUNDLES, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name).sort();
    const kubeconfig = cp.kubeconfig('admin');
    const path = `${dirname(binary('kubectl'))}:${process.env.PATH ?? ''}`;
    for (const name of cases) {
      const { input } = loadCase(name);
      const findings = diagnose(input).findings;
      const fixes = findings.flatMap((f) => f.fixes ?? []);
      if (fixes.length === 0) continue;
      const printed = renderFixCommands(findings);
      const cluster = JSON.parse(readFileSync(join(BUNDLES, name, 'cluster.json'), 'utf8')) as { items: Obj[] };
      const services = cluster.items.filter((o) => o.kind === 'Service');
      for (const ns of new Set(services.map((s) => s.metadata.namespace as string))) {
        if ((await cp.request('GET', `/api/v1/namespaces/${ns}`)).status === 404) await cp.create('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
      }
      try {
        for (const s of services) await cp.create(`/api/v1/namespaces/${s.metadata.namespace}/services`, creatable(s));
        for (const fix of fixes) {
          expect(printed, name).toContain(fix.command);
          expect(fix.effect.length, fix.command).toBeGreaterThan(40);
          const r = spawnSync('sh', ['-c', `${fix.command} --dry-run=server -o json`], { encoding: 'utf8', env: { ...process.env, PATH: path, KUBECONFIG: kubeconfig }, timeout: 60_000 });
          expect(r.status, `${name}: ${fix.command}\n${r.stderr}`).toBe(0);
          const obj = JSON.parse(r.stdout) as Obj;
          expect([obj.metadata.namespace, obj.metadata.name]).toEqual([fix.object.namespace, fix.object.name]);
          expect(changed(fix, obj), `${name}: ${fix.command}\n${r.stdout}`).toBe(true);
          seen.add(fix.kind);
        }
        // A dry run changes nothing: clbprobe's commands are for the owner to run.
        for (const fix of fixes) {
          const live = (await cp.request('GET', `/api/v1/namespaces/${fix.object.namespace}/services/${fix.object.name}`)).body as Obj;
          expect(changed(fix, live), fix.command).toBe(false);
        }
      } finally {
        for (const s of services) await cp.request('DELETE', `/api/v1/namespaces/${s.metadata.namespace}/services/${s.metadata.name}`);
      }
    }
    expect([...seen].sort()).toEqual([...KINDS].sort());
  }, 180_000);
});
