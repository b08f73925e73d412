// One namespace's Services must not take the agent down (issue 36, finding 2): 220 ClusterIP
// Services with a 250 KB annotation each (55 MB, what the `edit` role may create) in the real
// kube-apiserver v1.20.2 (test/support/kube-control-plane.ts), and the agent started as the
// DaemonSet runs it (test/support/shipped-agent.ts: the image's Node with the manifest's heap
// flags, the shipped bundle) with deploy/rbac.yaml's identity. Reading a list page whole put the
// page's 55 MB text, its pieces and the parsed annotations in a 160 MB heap: "Reached heap
// limit" at start and at every relist. The agent must come up with the other Services in its
// view, name each fat one in its log (kind, namespace/name, size, reason), follow the watch past
// more of them, list them all again after a 410 without naming them twice, and stay under the
// container's memory limit.
// The node namespace is cbf-*; the API server listens on 127.0.0.1.
// CBF_TRACE_GC=1 adds --trace-gc to the node flags and prints the heap's peak (a measurement, not
// the shipped command line).
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterList, LAB } from '../../src/demo/lab.js';
import { Netns } from '../../src/demo/netns.js';
import { parseSamples, type Sample } from '../../src/export/parse-samples.js';
import { agentContainer, bytesOf, REPO_ROOT } from '../support/daemonset.js';
import { type ControlPlane, startControlPlane } from '../support/kube-control-plane.js';
import { createList } from '../support/kube-objects.js';
import { isRoot } from '../support/netns.js';
import { shippedAgent } from '../support/shipped-agent.js';
import { freePort, sleep, until } from '../support/wait.js';

const NS = 'fat';
const FAT = 220;
const BLOB_BYTES = 250_000;
const SLIM = 5;
const AGENT_USER = 'system:serviceaccount:clbprobe:clbprobe';

const service = (name: string, annotations: Record<string, string> = {}): Record<string, unknown> => ({
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name, namespace: NS, annotations },
  spec: {
    type: 'ClusterIP',
    selector: { app: name },
    ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 8080 }],
  },
});
/** Printable, varied text (not one repeated byte), as a tenant's blob would be. */
const blob = (seed: number): string => {
  const unit = `${seed}:${'0123456789abcdefghijklmnopqrstuvwxyz'.repeat(3)};`;
  return unit.repeat(Math.ceil(BLOB_BYTES / unit.length)).slice(0, BLOB_BYTES);
};
const fat = (name: string, seed: number) => service(name, { 'example.com/blob': blob(seed) });

interface LogLine {
  msg?: string;
  [k: string]: unknown;
}

describe.skipIf(!isRoot)(
  "a namespace of fat Services doesn't crash the agent (real kube-apiserver v1.20.2, the shipped agent)",
  () => {
    let cp: ControlPlane;
    let node: Netns | undefined;
    let dir: string;
    let agent: ChildProcess | undefined;
    let exited: string | undefined;
    let stderr = '';
    let stdout = '';
    let peakRssKiB = 0;
    let sampler: NodeJS.Timeout | undefined;
    let metricsUrl: string;

    const logLines = (): LogLine[] =>
      stderr
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as LogLine);
    const skippedLogged = (): LogLine[] => logLines().filter((l) => l.msg === 'cluster object skipped: too large');
    const servicePorts = (): number | undefined =>
      logLines()
        .filter((l) => l.msg === 'cluster view changed')
        .at(-1)?.servicePorts as number | undefined;
    const scrape = async (): Promise<Sample[]> => parseSamples(await (await fetch(metricsUrl)).text());
    const find = (s: Sample[], name: string, labels: Record<string, string>): number | undefined =>
      s.find((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v))?.value;
    /** Service ports the API holds outside the fat ones: what the agent's view must have. */
    const expectedPorts = async (): Promise<number> => {
      const r = await cp.request('GET', '/api/v1/services');
      const items = (
        r.body as { items: { metadata: { namespace: string; name: string }; spec: { ports?: unknown[] } }[] }
      ).items;
      return items
        .filter((s) => !(s.metadata.namespace === NS && s.metadata.name.startsWith('fat-')))
        .reduce((n, s) => n + (s.spec.ports?.length ?? 0), 0);
    };
    const alive = (): void => {
      if (exited)
        throw new Error(
          `the agent ${exited} (peak RSS ${(peakRssKiB / 1024).toFixed(1)} MiB):\n${stderr.slice(-3000)}`,
        );
    };

    beforeAll(async () => {
      cp = await startControlPlane();
      cp.kubectl(['apply', '-f', join(REPO_ROOT, 'deploy/namespace.yaml')]);
      cp.kubectl(['apply', '-n', 'clbprobe', '-f', join(REPO_ROOT, 'deploy/rbac.yaml')]);
      await createList(cp, clusterList('Local') as { items: Record<string, unknown>[] });
      await cp.request('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
      for (let i = 0; i < SLIM; i++)
        await cp.create(`/api/v1/namespaces/${NS}/services`, service(`slim-${i}`, { note: 'small' }));
      // Four writers at a time: 55 MB through one API server on a shared 2-core machine.
      const names = Array.from({ length: FAT }, (_, i) => i);
      await Promise.all(
        Array.from({ length: 4 }, async (_, w) => {
          for (let i = w; i < names.length; i += 4)
            await cp.create(`/api/v1/namespaces/${NS}/services`, fat(`fat-${i}`, i));
        }),
      );

      dir = mkdtempSync(join(tmpdir(), 'cbf-'));
      node = Netns.create('cbf-node');
      const port = await freePort();
      metricsUrl = `http://127.0.0.1:${port}/metrics`;
      const shipped = shippedAgent(
        [
          '--kubeconfig',
          cp.kubeconfig('clbprobe'),
          '--node-name',
          LAB.node1Name,
          '--netns',
          node.name,
          '--capture',
          'off',
          '--listen',
          `127.0.0.1:${port}`,
          '--evidence-socket',
          join(dir, 'ev.sock'),
        ],
        LAB.node1Name,
      );
      const argv = process.env.CBF_TRACE_GC ? ['--trace-gc', ...shipped.argv] : shipped.argv;
      agent = spawn(shipped.node, argv, { env: shipped.env, stdio: ['ignore', 'pipe', 'pipe'] });
      agent.stdout!.on('data', (b: Buffer) => (stdout += b));
      agent.stderr!.on('data', (b: Buffer) => (stderr += b));
      agent.on('exit', (code, sig) => (exited = `exited (${code ?? sig})`));
      const pid = agent.pid!;
      // VmHWM is the peak RSS; read while the process is there (it is gone with the process).
      sampler = setInterval(() => {
        try {
          const hwm = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
          if (hwm) peakRssKiB = Math.max(peakRssKiB, Number(hwm[1]));
        } catch {
          // gone
        }
      }, 100);
      await until(
        '/readyz',
        60_000,
        async () => {
          alive();
          return (await fetch(metricsUrl.replace('/metrics', '/readyz')).catch(() => undefined))?.ok ? true : undefined;
        },
        200,
      );
    }, 300_000);

    afterAll(async () => {
      clearInterval(sampler);
      agent?.kill('SIGKILL');
      node?.delete();
      await cp?.stop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('comes up with a fresh view of every other Service, and stays up', async () => {
      alive();
      const want = await expectedPorts();
      await until(
        'the view with every Service but the fat ones',
        30_000,
        () => (servicePorts() === want ? true : undefined),
        200,
      ).catch((e: Error) => {
        throw new Error(`${e.message}: last logged servicePorts ${servicePorts()}, want ${want}`);
      });
      const s = await scrape();
      expect(find(s, 'clbprobe_source_up', { source: 'cluster' })).toBe(1);
      // A while later (the other sources' reads, a diagnosis), still there.
      await sleep(3000);
      alive();
      expect(stderr).not.toContain('heap limit');
    }, 60_000);

    it('names each fat Service in its log once: kind, namespace/name, size and reason', () => {
      const skipped = skippedLogged();
      expect(skipped.map((l) => l.object).sort()).toEqual(
        Array.from({ length: FAT }, (_, i) => `${NS}/fat-${i}`).sort(),
      );
      for (const l of skipped) {
        expect(l).toMatchObject({ source: 'cluster', kind: 'Service' });
        expect(l.bytes as number).toBeGreaterThan(BLOB_BYTES);
        expect(l.reason).toBe(
          `metadata.annotations["example.com/blob"] is ${BLOB_BYTES} bytes, more than the 16 KiB kept of a value`,
        );
      }
    });

    it('follows the watch: a new fat Service is skipped, a slim one joins, a fat one slimmed down joins', async () => {
      const before = servicePorts()!;
      await cp.create(`/api/v1/namespaces/${NS}/services`, fat('fat-late', FAT));
      await cp.create(`/api/v1/namespaces/${NS}/services`, service('slim-late'));
      await until(
        'fat/fat-late skipped through the watch',
        20_000,
        () => (skippedLogged().some((l) => l.object === `${NS}/fat-late`) ? true : undefined),
        100,
      );
      await until('fat/slim-late in the view', 20_000, () => (servicePorts() === before + 1 ? true : undefined), 100);
      const r = await cp.request('PATCH', `/api/v1/namespaces/${NS}/services/fat-0`, {
        metadata: { annotations: { 'example.com/blob': null } },
      });
      expect(r.status).toBe(200);
      await until(
        'fat/fat-0 in the view once slim',
        20_000,
        () => (servicePorts() === before + 2 ? true : undefined),
        100,
      );
      expect(skippedLogged().filter((l) => l.object === `${NS}/fat-late`)).toHaveLength(1);
      alive();
    }, 60_000);

    it('lists them all again after a 410 (the API server restarted past its version): up, no one logged twice', async () => {
      const lists = () =>
        cp
          .audit()
          .filter(
            (e) => e.user.username === AGENT_USER && e.verb === 'list' && e.requestURI.startsWith('/api/v1/services?'),
          ).length;
      const listsBefore = lists();
      const before = servicePorts()!;
      // A write to etcd while the API server is away: the restarted server's watch cache begins after
      // the agent's version, so its watch gets 410 Gone and it lists everything again.
      await cp.stopApiServer();
      const put = await fetch(`${cp.etcdUrl}/v3/kv/put`, {
        method: 'POST',
        body: JSON.stringify({ key: btoa('/cbf-bump'), value: btoa('x') }),
      });
      expect(put.ok).toBe(true);
      await cp.startApiServer();
      await cp.create(`/api/v1/namespaces/${NS}/services`, service('slim-relist'));
      await until(
        'a relist of Services with fat/slim-relist',
        90_000,
        () => (lists() > listsBefore && servicePorts() === before + 1 ? true : undefined),
        250,
      ).catch((e: Error) => {
        throw new Error(
          `${e.message}: lists ${listsBefore} -> ${lists()}, servicePorts ${before} -> ${servicePorts()}; log:\n${stderr
            .split('\n')
            .filter((l) => !l.includes('too large'))
            .slice(-15)
            .join('\n')}`,
        );
      });
      alive();
      const counts = new Map<unknown, number>();
      for (const l of skippedLogged()) counts.set(l.object, (counts.get(l.object) ?? 0) + 1);
      // Every fat Service and fat-late, each once: the relist found the same ones still skipped.
      expect(counts.size).toBe(FAT + 1);
      expect([...counts].filter(([, n]) => n !== 1)).toEqual([]);
    }, 180_000);

    it("stays within the container's memory limit", () => {
      alive();
      const limit = bytesOf(agentContainer().resources.limits.memory!);
      const gc = [...stdout.matchAll(/ ([\d.]+) \(([\d.]+)\) -> ([\d.]+) \(([\d.]+)\) MB/g)];
      const heapPeak = gc.length > 0 ? Math.max(...gc.map((m) => Number(m[1]))) : undefined;
      console.log(
        `agent with ${FAT} fat Services: peak RSS ${(peakRssKiB / 1024).toFixed(1)} MiB${heapPeak !== undefined ? `, heap peak ${heapPeak} MB (--trace-gc)` : ''}`,
      );
      expect(peakRssKiB).toBeGreaterThan(0);
      expect(peakRssKiB * 1024).toBeLessThan(limit);
    });
  },
);
