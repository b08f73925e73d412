// Pod exec and agent-pod listing against test/support/fake-apiserver.ts: a
// real HTTP server, real WebSocket upgrades with v5/v4.channel.k8s.io framing,
// real processes behind each exec. No root needed.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiTarget, loadApiTarget } from '../../../src/cluster/kube-config.js';
import { execInPod, exitCodeOf, PodExecError } from '../../../src/remote/pod-exec.js';
import { listAgentPods } from '../../../src/remote/workstation-client.js';
import { FakeApiServer } from '../../support/fake-apiserver.js';

function pod(
  name: string,
  node: string,
  phase = 'Running',
  namespace = 'clbprobe',
  labels: Record<string, string> = { 'app.kubernetes.io/name': 'clbprobe' },
) {
  return {
    metadata: { name, namespace, labels },
    spec: { nodeName: node, containers: [{ name: 'agent', image: 'clbprobe:0.1.0' }] },
    status: {
      phase,
      containerStatuses: [
        { name: 'agent', ready: phase === 'Running', restartCount: 0, image: 'clbprobe:0.1.0', imageID: '', state: {} },
      ],
    },
  };
}

interface Run {
  code?: number;
  error?: PodExecError;
  stdout: string;
  stderr: string;
}

const dir = mkdtempSync(join(tmpdir(), 'clbprobe-pod-exec-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The API target of a kubeconfig's text. */
function targetOf(name: string, kubeconfig: string): ApiTarget {
  writeFileSync(join(dir, name), kubeconfig);
  return loadApiTarget(join(dir, name));
}

describe('pod exec through the API server (WebSocket, channel protocol)', () => {
  const api = new FakeApiServer();
  let kc: ApiTarget;
  const procs: ChildProcess[] = [];

  const run = async (
    podName: string,
    command: string[],
    timeoutMs = 10_000,
    container = 'agent',
    config = kc,
  ): Promise<Run> => {
    const r: Run = { stdout: '', stderr: '' };
    try {
      r.code = await execInPod(
        config,
        { namespace: 'clbprobe', pod: podName, container },
        command,
        { stdout: (b) => (r.stdout += b.toString()), stderr: (b) => (r.stderr += b.toString()) },
        timeoutMs,
      );
    } catch (e) {
      if (!(e instanceof PodExecError)) throw e;
      r.error = e;
    }
    return r;
  };

  beforeAll(async () => {
    await api.start();
    kc = targetOf('kubeconfig', api.kubeconfig());
    api.apply('pods', pod('clbprobe-aaaaa', 'node-a'));
    api.apply('pods', pod('clbprobe-ppppp', 'node-p', 'Pending'));
    api.apply('pods', pod('other-zzzzz', 'node-a', 'Running', 'clbprobe', { app: 'other' }));
    api.apply('pods', pod('clbprobe-xxxxx', 'node-x', 'Running', 'elsewhere'));
    // The command runs for real: argv exactly as the client sent it.
    api.onExec = (call) => {
      const p = spawn(call.command[0]!, call.command.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
      procs.push(p);
      return p;
    };
  });
  afterAll(async () => {
    for (const p of procs) p.kill('SIGKILL');
    await api.stop();
  });

  it('streams stdout and stderr and returns the exit code from the channel-3 Status', async () => {
    const r = await run('clbprobe-aaaaa', ['sh', '-c', 'printf "line 1\\nline 2\\n"; printf "oops" >&2; exit 3']);
    expect(r).toEqual({ code: 3, stdout: 'line 1\nline 2\n', stderr: 'oops' });
    const call = api.execs.at(-1)!;
    expect(call).toMatchObject({
      namespace: 'clbprobe',
      pod: 'clbprobe-aaaaa',
      container: 'agent',
      protocol: 'v5.channel.k8s.io',
    });
    expect(call.command).toEqual(['sh', '-c', 'printf "line 1\\nline 2\\n"; printf "oops" >&2; exit 3']);
    expect(call.query).toMatchObject({ stdout: ['true'], stderr: ['true'], stdin: ['false'], tty: ['false'] });
    expect((await run('clbprobe-aaaaa', ['true'])).code).toBe(0);
  });

  it('binary output crosses intact (every byte value, frames split anywhere)', async () => {
    const r: Buffer[] = [];
    const code = await execInPod(
      kc,
      { namespace: 'clbprobe', pod: 'clbprobe-aaaaa', container: 'agent' },
      [process.execPath, '-e', 'process.stdout.write(Buffer.from(Array.from({length: 70000}, (_, i) => i % 256)))'],
      { stdout: (b) => r.push(b), stderr: () => undefined },
      10_000,
    );
    expect(code).toBe(0);
    const all = Buffer.concat(r);
    expect(all.length).toBe(70000);
    expect(all.every((b, i) => b === i % 256)).toBe(true);
  });

  it('403: says which RBAC verb is missing, with the API server message', async () => {
    api.forbidExec('clbprobe', 'clbprobe-aaaaa');
    try {
      const r = await run('clbprobe-aaaaa', ['true']);
      expect(r.error?.kind).toBe('forbidden');
      expect(r.error?.statusCode).toBe(403);
      expect(r.error?.message).toContain('User "tester" cannot create resource "pods/exec"');
      expect(r.error?.message).toContain('needs RBAC verbs "get" and "create" on "pods/exec" in namespace clbprobe');
    } finally {
      api.forbidExec('clbprobe', 'clbprobe-aaaaa', false);
    }
  });

  it('refusals keep the API server reason: unknown pod, wrong container, pod not running, bad token', async () => {
    expect((await run('clbprobe-gone0', ['true'])).error).toMatchObject({
      kind: 'not-found',
      message: expect.stringContaining('pod clbprobe/clbprobe-gone0 is gone'),
    });
    expect((await run('clbprobe-aaaaa', ['true'], 10_000, 'sidecar')).error?.message).toBe(
      '400: container sidecar is not valid for pod clbprobe-aaaaa',
    );
    expect((await run('clbprobe-ppppp', ['true'])).error?.message).toContain('is not running (phase Pending)');
    const bad = targetOf('bad', api.kubeconfig().replace('fake-token', 'stolen-token'));
    expect((await run('clbprobe-aaaaa', ['true'], 10_000, 'agent', bad)).error?.kind).toBe('unauthorized');
  });

  it('times out a command that never ends, and the remote process is stopped', async () => {
    const t0 = performance.now();
    const r = await run('clbprobe-aaaaa', ['sleep', '30'], 500);
    expect(r.error?.kind).toBe('timeout');
    expect(performance.now() - t0).toBeLessThan(3000);
    // Our side closed the socket; the server kills the command as the kubelet does.
    const sleeper = procs.at(-1)!;
    await new Promise<void>((resolve) =>
      sleeper.exitCode !== null || sleeper.signalCode !== null ? resolve() : sleeper.once('exit', () => resolve()),
    );
    expect(sleeper.signalCode).toBe('SIGKILL');
  });

  it('a connection cut before the exit status is reported as such, not as success', async () => {
    const pending = run('clbprobe-aaaaa', ['sh', '-c', 'echo started; sleep 30']);
    await new Promise((r) => setTimeout(r, 300));
    await api.stop();
    const r = await pending;
    await api.start();
    expect(r.stdout).toBe('started\n');
    expect(r.error?.kind).toBe('no-status');
  });

  it('an API server that is not there is a connection error', async () => {
    const down = targetOf('down', api.kubeconfig().replace(/127\.0\.0\.1:\d+/, '127.0.0.1:1'));
    expect((await run('clbprobe-aaaaa', ['true'], 5000, 'agent', down)).error).toMatchObject({
      kind: 'connection',
      message: expect.stringContaining('ECONNREFUSED'),
    });
  });

  it('exitCodeOf reads Success, NonZeroExitCode, and refuses other failures', () => {
    expect(exitCodeOf({ status: 'Success' })).toBe(0);
    expect(
      exitCodeOf({
        status: 'Failure',
        reason: 'NonZeroExitCode',
        details: { causes: [{ reason: 'ExitCode', message: '2' }] },
      }),
    ).toBe(2);
    expect(() =>
      exitCodeOf({
        status: 'Failure',
        reason: 'InternalError',
        message: 'exec: "nod": executable file not found in $PATH',
      }),
    ).toThrow(/executable file not found/);
    expect(() => exitCodeOf({ status: 'Failure', reason: 'NonZeroExitCode', details: { causes: [] } })).toThrow(
      PodExecError,
    );
  });

  it('lists agent pods by label in one namespace; 403 names the list verb', async () => {
    const pods = await listAgentPods(kc, 'clbprobe', 'app.kubernetes.io/name=clbprobe', 'agent', 5000);
    expect(pods.map((p) => [p.name, p.node, p.phase, p.ready])).toEqual([
      ['clbprobe-aaaaa', 'node-a', 'Running', true],
      ['clbprobe-ppppp', 'node-p', 'Pending', false],
    ]);
    expect(api.requests.at(-1)).toMatchObject({
      resource: 'pods',
      query: { labelSelector: 'app.kubernetes.io/name=clbprobe' },
    });
    expect(
      (await listAgentPods(kc, 'clbprobe', 'app.kubernetes.io/name!=clbprobe', 'agent', 5000)).map((p) => p.name),
    ).toEqual(['other-zzzzz']);
    api.forbid('pods');
    try {
      await expect(listAgentPods(kc, 'clbprobe', 'app.kubernetes.io/name=clbprobe', 'agent', 5000)).rejects.toThrow(
        /403 Forbidden: pods is forbidden: User "tester" cannot list resource "pods" in API group "" in the namespace "clbprobe" \(needs RBAC verb "list" on "pods" in namespace clbprobe/,
      );
    } finally {
      api.forbid('pods', false);
    }
  });
});
