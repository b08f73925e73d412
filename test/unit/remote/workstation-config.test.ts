// The workstation's kubeconfig for `evidence --all-nodes` (and `kubectl clbprobe`):
// --kubeconfig, else KUBECONFIG / ~/.kube/config; --context instead of current-context,
// an unknown context refused in kubectl's words; exec plugin and token users against the fake API
// server.
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadWorkstationTarget } from '../../../src/cluster/kube-config.js';
import { listAgentPods, loadWorkstationConfig } from '../../../src/remote/workstation-client.js';
import { FakeApiServer } from '../../support/fake-apiserver.js';

const dir = mkdtempSync(join(tmpdir(), 'clbprobe-kc-'));
const file = join(dir, 'config');
writeFileSync(
  file,
  `apiVersion: v1
kind: Config
current-context: prod
clusters:
- name: prod
  cluster: {server: "https://prod.example:6443"}
- name: lab
  cluster: {server: "https://lab.example:6443"}
users:
- name: me
  user: {token: t}
contexts:
- name: prod
  context: {cluster: prod, user: me}
- name: lab
  context: {cluster: lab, user: me}
`,
);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('loadWorkstationConfig', () => {
  it("uses the file's current-context without --context", () => {
    expect(loadWorkstationConfig(file).server).toBe('https://prod.example:6443');
  });

  it('uses the --context one instead', () => {
    const kc = loadWorkstationConfig(file, 'lab');
    expect(kc.source).toBe(`kubeconfig ${file} (context lab)`);
    expect(kc.server).toBe('https://lab.example:6443');
  });

  it('refuses a context the kubeconfig does not have, as kubectl does', () => {
    expect(() => loadWorkstationConfig(file, 'nosuch')).toThrow('context "nosuch" does not exist');
  });
});

describe('loadWorkstationTarget: the files kubectl would read', () => {
  const write = (name: string, text: string): string => {
    writeFileSync(join(dir, name), text);
    return join(dir, name);
  };
  // Two files in KUBECONFIG: the first sets the context and its own cluster; the user and a
  // same-named cluster come from both, the first file's winning; relative paths start at each entry's file.
  const first = write(
    'first',
    'current-context: lab\ncontexts:\n- name: lab\n  context: {cluster: lab, user: me}\n' +
      'clusters:\n- name: lab\n  cluster: {server: "https://first.example:6443"}\n',
  );
  mkdirSync(join(dir, 'second.d'), { recursive: true });
  writeFileSync(join(dir, 'second.d', 'token'), 'from-second\n');
  const second = write(
    'second.d/config',
    'current-context: prod\nclusters:\n- name: lab\n  cluster: {server: "https://second.example:6443"}\n' +
      'users:\n- name: me\n  user: {tokenFile: token}\n',
  );

  it('merges KUBECONFIG files, the first of each name winning, paths relative to their own file', async () => {
    const target = loadWorkstationTarget(undefined, undefined, { KUBECONFIG: `/nonexistent:${first}:${second}` });
    expect(target.server).toBe('https://first.example:6443');
    expect(await target.requestOptions()).toEqual({ headers: { authorization: 'Bearer from-second' } });
  });

  it('~/.kube/config without KUBECONFIG; the service account without either; else says what to do', () => {
    mkdirSync(join(dir, 'home', '.kube'), { recursive: true });
    writeFileSync(join(dir, 'home', '.kube', 'config'), readFileSync(file));
    expect(loadWorkstationTarget(undefined, undefined, { HOME: join(dir, 'home') }).server).toBe(
      'https://prod.example:6443',
    );
    const sa = join(dir, 'sa');
    mkdirSync(sa, { recursive: true });
    writeFileSync(join(sa, 'token'), 't');
    writeFileSync(join(sa, 'ca.crt'), '');
    const env = { HOME: join(dir, 'nohome'), KUBERNETES_SERVICE_HOST: '10.0.0.1', KUBERNETES_SERVICE_PORT: '443' };
    expect(loadWorkstationTarget(undefined, undefined, env, sa).source).toBe('in-cluster service account');
    expect(() => loadWorkstationTarget(undefined, undefined, { HOME: join(dir, 'nohome') })).toThrow(
      'no kubeconfig: set KUBECONFIG, create ~/.kube/config, run in a pod, or pass --kubeconfig FILE',
    );
  });
});

describe('the workstation client against the fake API server', () => {
  const api = new FakeApiServer();
  beforeAll(() => api.start());
  afterAll(() => api.stop());

  /** The fake server's kubeconfig with `user` (YAML lines under user:) instead of its token. */
  const withUser = (name: string, user: string[]): string => {
    const path = join(dir, name);
    const lines = api.kubeconfig().split('\n');
    const at = lines.findIndex((l) => l.trim().startsWith('token:'));
    lines.splice(at, 1, ...user.map((l) => `    ${l}`));
    writeFileSync(path, lines.join('\n'));
    return path;
  };
  const list = (kubeconfig: string) =>
    listAgentPods(loadWorkstationConfig(kubeconfig), 'clbprobe', 'app=clbprobe', 'agent', 5000);

  it('authenticates with the token an exec plugin prints; a wrong token is refused in words', async () => {
    const plugin = join(dir, 'plugin.sh');
    const credential =
      '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"fake-token"}}';
    writeFileSync(plugin, `#!/bin/sh\necho '${credential}'\n`);
    chmodSync(plugin, 0o755);
    const exec = withUser('exec.yaml', [
      'exec:',
      '  apiVersion: client.authentication.k8s.io/v1',
      `  command: ${plugin}`,
      '  interactiveMode: Never',
    ]);
    await expect(list(exec)).resolves.toEqual([]);
    await expect(list(writeKubeconfig('wrong.yaml', api.kubeconfig('wrong')))).rejects.toThrow(
      /401 Unauthorized: the API server rejected the kubeconfig's credentials/,
    );
  });
});

function writeKubeconfig(name: string, text: string): string {
  writeFileSync(join(dir, name), text);
  return join(dir, name);
}
