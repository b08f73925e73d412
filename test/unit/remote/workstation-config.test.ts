// The workstation's kubeconfig for `evidence --all-nodes` (and `kubectl clbprobe`):
// --kubeconfig, else KUBECONFIG / ~/.kube/config; --context instead of current-context,
// an unknown context refused in kubectl's words.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadWorkstationConfig } from '../../../src/cli/evidence-remote.js';

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
    expect(loadWorkstationConfig(file).getCurrentCluster()?.server).toBe('https://prod.example:6443');
  });

  it('uses the --context one instead', () => {
    const kc = loadWorkstationConfig(file, 'lab');
    expect(kc.getCurrentContext()).toBe('lab');
    expect(kc.getCurrentCluster()?.server).toBe('https://lab.example:6443');
  });

  it('refuses a context the kubeconfig does not have, as kubectl does', () => {
    expect(() => loadWorkstationConfig(file, 'nosuch')).toThrow('context "nosuch" does not exist');
  });
});
