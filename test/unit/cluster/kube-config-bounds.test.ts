// Size bounds on the files the API client's configuration reads (kube-config.ts): the
// kubeconfig, token files and certificate files named in it, and the in-cluster service
// account's token and CA. One byte past a bound is refused, naming the file and the bound; a
// file at the bound is read.
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  KubeConfigError,
  loadApiTarget,
  MAX_CERTIFICATE_BYTES,
  MAX_KUBECONFIG_BYTES,
  MAX_TOKEN_BYTES,
} from '../../../src/cluster/kube-config.js';
import { kubeconfigText } from '../../support/kubeconfig-text.js';

const dir = mkdtempSync(join(tmpdir(), 'cbhd-kubeconfig-bounds-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const f = (name: string) => join(dir, name);

/** A file of exactly `bytes` bytes: `head`, then YAML comment lines. */
function padded(name: string, head: string, bytes: number): string {
  const line = `#${'x'.repeat(1022)}\n`;
  let text = head;
  while (text.length + line.length <= bytes) text += line;
  text += '#'.padEnd(bytes - text.length, 'x');
  writeFileSync(f(name), text);
  return f(name);
}

const KUBECONFIG = (user: string[], cluster: string[] = []) =>
  kubeconfigText(['server: https://127.0.0.1:6443', ...cluster], user);

const refused = (load: () => unknown): string => {
  try {
    load();
  } catch (e) {
    expect(e).toBeInstanceOf(KubeConfigError);
    return (e as Error).message;
  }
  throw new Error('read without complaint');
};

describe('kubeconfig size bounds', () => {
  it(`a kubeconfig over ${MAX_KUBECONFIG_BYTES >> 20} MiB`, () => {
    expect(loadApiTarget(padded('at-bound', KUBECONFIG([]), MAX_KUBECONFIG_BYTES), {}).server).toBe(
      'https://127.0.0.1:6443',
    );
    const path = padded('over', KUBECONFIG([]), MAX_KUBECONFIG_BYTES + 1);
    expect(refused(() => loadApiTarget(path, {}))).toBe(
      `kubeconfig ${path} is larger than 4 MiB, the most clbprobe reads of it`,
    );
  });

  it(`a tokenFile over ${MAX_TOKEN_BYTES >> 20} MiB`, async () => {
    padded('token-ok', 'abc', MAX_TOKEN_BYTES);
    const ok = loadApiTarget(padded('kc-token-ok', KUBECONFIG(['tokenFile: token-ok']), 1000), {});
    expect(((await ok.requestOptions()).headers as Record<string, string>).authorization).toMatch(/^Bearer abc#x/);
    const token = padded('token-big', 'abc', MAX_TOKEN_BYTES + 1);
    expect(refused(() => loadApiTarget(padded('kc-token-big', KUBECONFIG(['tokenFile: token-big']), 1000), {}))).toBe(
      `the token file ${token} is larger than 1 MiB, the most clbprobe reads of it`,
    );
  });

  it(`a certificate-authority or client certificate file over ${MAX_CERTIFICATE_BYTES >> 20} MiB`, () => {
    const ca = padded('ca-big.crt', '-----BEGIN CERTIFICATE-----\n', MAX_CERTIFICATE_BYTES + 1);
    expect(
      refused(() => loadApiTarget(padded('kc-ca', KUBECONFIG([], ['certificate-authority: ca-big.crt']), 1000), {})),
    ).toBe(`the cluster CA (certificate-authority) ${ca} is larger than 4 MiB, the most clbprobe reads of it`);
    padded('key.pem', '-----BEGIN PRIVATE KEY-----\n', 100);
    expect(
      refused(() =>
        loadApiTarget(
          padded('kc-cert', KUBECONFIG(['client-certificate: ca-big.crt', 'client-key: key.pem']), 1000),
          {},
        ),
      ),
    ).toMatch(/^the client certificate \(client-certificate\) .*ca-big\.crt is larger than 4 MiB/);
  });
});

describe('in-cluster service account size bounds', () => {
  const sa = (name: string, token: number, ca: number): string => {
    const d = f(name);
    mkdirSync(d);
    padded(`${name}/token`, 'eyJ', token);
    padded(`${name}/ca.crt`, '-----BEGIN CERTIFICATE-----\n', ca);
    return d;
  };
  const env = { KUBERNETES_SERVICE_HOST: '127.0.0.1' };

  it('token and CA at their bounds are read', () => {
    expect(loadApiTarget(undefined, env, sa('sa-ok', MAX_TOKEN_BYTES, MAX_CERTIFICATE_BYTES)).source).toBe(
      'in-cluster service account',
    );
  });

  it(`a token over ${MAX_TOKEN_BYTES >> 20} MiB`, () => {
    const d = sa('sa-token', MAX_TOKEN_BYTES + 1, 100);
    expect(refused(() => loadApiTarget(undefined, env, d))).toBe(
      `the service account token ${d}/token is larger than 1 MiB, the most clbprobe reads of it`,
    );
  });

  it(`a CA over ${MAX_CERTIFICATE_BYTES >> 20} MiB`, () => {
    const d = sa('sa-ca', 100, MAX_CERTIFICATE_BYTES + 1);
    expect(refused(() => loadApiTarget(undefined, env, d))).toBe(
      `the service account CA ${d}/ca.crt is larger than 4 MiB, the most clbprobe reads of it`,
    );
  });

  it('a token path that never ends (a device reporting size 0) is read only to the bound', () => {
    const d = sa('sa-zero', 10, 100);
    rmSync(join(d, 'token'));
    symlinkSync('/dev/zero', join(d, 'token'));
    expect(refused(() => loadApiTarget(undefined, env, d))).toBe(
      `the service account token ${d}/token is larger than 1 MiB, the most clbprobe reads of it`,
    );
  });
});
