// The API client's configuration (kube-config.ts) and transport (kube-api.ts) against real TLS:
// a CA, server and client certificates made by openssl, an https server that requires a client
// certificate or a bearer token, the in-cluster service account layout, and exec credential
// plugins (tokens and client certificates, kept until they expire) against both servers.
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiError, KubeApi } from '../../../src/cluster/kube-api.js';
import { KubeConfigError, loadApiTarget } from '../../../src/cluster/kube-config.js';
import { FakeApiServer } from '../../support/fake-apiserver.js';
import { kubeconfigText } from '../../support/kubeconfig-text.js';

const dir = mkdtempSync(join(tmpdir(), 'clbprobe-kubeconfig-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const f = (name: string) => join(dir, name);
const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
const b64 = (name: string) => readFileSync(f(name)).toString('base64');

/** A CA, a server certificate for 127.0.0.1 signed by it, a client certificate, and a second, unrelated CA. */
function makeCertificates(): void {
  for (const ca of ['ca', 'other-ca']) {
    openssl(
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      `${ca}.key`,
      '-out',
      `${ca}.crt`,
      '-days',
      '2',
      '-subj',
      `/CN=${ca}`,
    );
  }
  writeFileSync(f('server.ext'), 'subjectAltName=IP:127.0.0.1,DNS:kubernetes.default.svc\n');
  openssl(
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    'server.key',
    '-out',
    'server.csr',
    '-subj',
    '/CN=apiserver',
  );
  openssl(
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.crt',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.crt',
    '-days',
    '2',
    '-extfile',
    'server.ext',
  );
  openssl(
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    'client.key',
    '-out',
    'client.csr',
    '-subj',
    '/CN=clbprobe/O=system:nodes',
  );
  openssl(
    'x509',
    '-req',
    '-in',
    'client.csr',
    '-CA',
    'ca.crt',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'client.crt',
    '-days',
    '2',
  );
}

const LIST = JSON.stringify({
  kind: 'ServiceList',
  apiVersion: 'v1',
  metadata: { resourceVersion: '42' },
  items: [{ metadata: { name: 'web' } }],
});

describe('API client configuration, over real TLS', () => {
  let server: Server;
  let port = 0;
  const seen: { auth?: string; clientCn?: string }[] = [];
  beforeAll(async () => {
    makeCertificates();
    server = createServer(
      {
        key: readFileSync(f('server.key')),
        cert: readFileSync(f('server.crt')),
        ca: readFileSync(f('ca.crt')),
        requestCert: true,
        rejectUnauthorized: false,
      },
      (req, res) => {
        const peer = (req.socket as import('node:tls').TLSSocket).getPeerCertificate();
        const authorized = (req.socket as import('node:tls').TLSSocket).authorized;
        const auth = req.headers.authorization;
        seen.push({
          ...(auth ? { auth } : {}),
          ...(authorized && peer.subject ? { clientCn: String(peer.subject.CN) } : {}),
        });
        if (!authorized && !auth)
          return res
            .writeHead(401, { 'content-type': 'application/json' })
            .end(JSON.stringify({ kind: 'Status', reason: 'Unauthorized', message: 'Unauthorized' }));
        res.writeHead(200, { 'content-type': 'application/json' }).end(LIST);
      },
    );
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise<void>((ok) => (server ? server.close(() => ok()) : ok())));

  const kubeconfig = (name: string, cluster: string[], user: string[]) => {
    writeFileSync(f(name), kubeconfigText(cluster, user));
    return f(name);
  };

  it('kubeconfig with a CA file (relative path) and client certificate data: verifies the server, presents the certificate', async () => {
    const path = kubeconfig(
      'certs.yaml',
      [`server: https://127.0.0.1:${port}/`, 'certificate-authority: ca.crt'],
      [`client-certificate-data: ${b64('client.crt')}`, `client-key-data: ${b64('client.key')}`],
    );
    const target = loadApiTarget(path);
    expect(target.server).toBe(`https://127.0.0.1:${port}`);
    expect(target.source).toBe(`kubeconfig ${path} (context x)`);
    const page = await new KubeApi(target).listPage('/api/v1/services', { limit: '10' });
    expect(page).toEqual({ resourceVersion: '42', items: [{ metadata: { name: 'web' } }] });
    expect(seen.at(-1)).toEqual({ clientCn: 'clbprobe' });
  });

  it('a server whose certificate the CA did not sign is refused, with the reason', async () => {
    const path = kubeconfig(
      'wrong-ca.yaml',
      [`server: https://127.0.0.1:${port}`, `certificate-authority-data: ${b64('other-ca.crt')}`],
      ['token: t'],
    );
    const err = await new KubeApi(loadApiTarget(path)).listPage('/api/v1/services', {}).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as Error).message).toMatch(/^GET \/api\/v1\/services: .*(certificate|self.signed).*\(\w+\)$/i);
    // insecure-skip-tls-verify is honoured (some dev clusters); then the token is what authenticates.
    const insecure = kubeconfig(
      'insecure.yaml',
      [`server: https://127.0.0.1:${port}`, 'insecure-skip-tls-verify: true'],
      ['username: admin', 'password: s3cret'],
    );
    await new KubeApi(loadApiTarget(insecure)).listPage('/api/v1/services', {});
    expect(seen.at(-1)).toEqual({ auth: `Basic ${Buffer.from('admin:s3cret').toString('base64')}` });
  });

  it('in a pod: the service account CA and token, the token read again at each request (it rotates)', async () => {
    const sa = join(dir, 'serviceaccount');
    execFileSync('mkdir', ['-p', sa]);
    writeFileSync(join(sa, 'ca.crt'), readFileSync(f('ca.crt')));
    writeFileSync(join(sa, 'token'), 'token-1\n');
    const target = loadApiTarget(
      undefined,
      { KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: String(port) },
      sa,
    );
    expect(target.server).toBe(`https://127.0.0.1:${port}`);
    const api = new KubeApi(target);
    await api.listPage('/api/v1/services', {});
    expect(seen.at(-1)).toEqual({ auth: 'Bearer token-1' });
    writeFileSync(join(sa, 'token'), 'token-2\n');
    await api.listPage('/api/v1/services', {});
    expect(seen.at(-1)).toEqual({ auth: 'Bearer token-2' });
    expect(loadApiTarget(undefined, { KUBERNETES_SERVICE_HOST: 'fd00::1' }, sa).server).toBe('https://[fd00::1]:443');
    rmSync(join(sa, 'token'));
    expect(() => loadApiTarget(undefined, { KUBERNETES_SERVICE_HOST: '127.0.0.1' }, sa)).toThrow(
      /cannot read the service account token .*\/token: ENOENT/,
    );
  });

  /** A plugin that logs each run to `runs` and prints `status` (an ExecCredential's). */
  const plugin = (name: string, status: object): string => {
    const path = f(name);
    const credential = JSON.stringify({
      apiVersion: 'client.authentication.k8s.io/v1',
      kind: 'ExecCredential',
      status,
    });
    writeFileSync(path, `#!/bin/sh\necho "$KUBERNETES_EXEC_INFO" >> ${path}.runs\ncat <<'EOF'\n${credential}\nEOF\n`);
    chmodSync(path, 0o755);
    return path;
  };
  const runs = (path: string): string[] => {
    try {
      return readFileSync(`${path}.runs`, 'utf8').trim().split('\n');
    } catch {
      return [];
    }
  };

  it('exec plugin: its client certificate is presented, its token kept until it expires', async () => {
    const certPlugin = plugin('cert-plugin.sh', {
      clientCertificateData: readFileSync(f('client.crt'), 'utf8'),
      clientKeyData: readFileSync(f('client.key'), 'utf8'),
    });
    const certs = kubeconfig(
      'exec-cert.yaml',
      [`server: https://127.0.0.1:${port}`, 'certificate-authority: ca.crt'],
      ['exec:', '  apiVersion: client.authentication.k8s.io/v1', `  command: ./cert-plugin.sh`],
    );
    const api = new KubeApi(loadApiTarget(certs));
    await api.listPage('/api/v1/services', {});
    expect(seen.at(-1)).toEqual({ clientCn: 'clbprobe' });
    await api.listPage('/api/v1/services', {});
    expect(runs(certPlugin)).toHaveLength(1); // no expirationTimestamp: good for the process's life
    expect(JSON.parse(runs(certPlugin)[0]!)).toEqual({
      apiVersion: 'client.authentication.k8s.io/v1',
      kind: 'ExecCredential',
      spec: { interactive: false },
    });

    const expired = plugin('expired-plugin.sh', { token: 'short-lived', expirationTimestamp: '2020-01-01T00:00:00Z' });
    const tokens = kubeconfig(
      'exec-token.yaml',
      [`server: https://127.0.0.1:${port}`, 'certificate-authority: ca.crt'],
      ['exec:', '  apiVersion: client.authentication.k8s.io/v1', `  command: ${expired}`, '  provideClusterInfo: true'],
    );
    const target = loadApiTarget(tokens);
    expect(runs(expired)).toEqual([]); // run at the first request, not at load
    await new KubeApi(target).listPage('/api/v1/services', {});
    await new KubeApi(target).listPage('/api/v1/services', {});
    expect(seen.at(-1)).toEqual({ auth: 'Bearer short-lived' });
    expect(runs(expired)).toHaveLength(2);
    expect(JSON.parse(runs(expired)[0]!).spec.cluster).toEqual({
      server: `https://127.0.0.1:${port}`,
      'certificate-authority-data': b64('ca.crt'),
    });
  });

  it('exec plugin: a failing or silent plugin fails the request with its words; auth-provider is refused', async () => {
    const failing = f('failing-plugin.sh');
    writeFileSync(failing, '#!/bin/sh\necho "run gcloud auth login first" >&2\nexit 1\n');
    chmodSync(failing, 0o755);
    const cluster = [`server: https://127.0.0.1:${port}`, 'certificate-authority: ca.crt'];
    const fails = kubeconfig('exec-fails.yaml', cluster, ['exec:', `  command: ${failing}`]);
    await expect(loadApiTarget(fails).requestOptions()).rejects.toThrow(/exec plugin .*: run gcloud auth login first/);
    const empty = kubeconfig('exec-empty.yaml', cluster, ['exec:', `  command: ${plugin('empty-plugin.sh', {})}`]);
    await expect(loadApiTarget(empty).requestOptions()).rejects.toThrow(/neither a token nor a client certificate/);
    const provider = kubeconfig('provider.yaml', cluster, ['auth-provider: {name: oidc}']);
    expect(() => loadApiTarget(provider)).toThrow(/auth-provider is not supported here: use an exec plugin/);
  });

  it('says what is wrong with a kubeconfig', async () => {
    const bad = (name: string, text: string) => (writeFileSync(f(name), text), f(name));
    const cases: [string, RegExp][] = [
      [bad('none.yaml', ''), /not a kubeconfig/],
      [bad('notyaml.yaml', 'a: [\n'), /not YAML/],
      [bad('noctx.yaml', 'apiVersion: v1\nclusters: []\n'), /no current-context/],
      [
        bad('nocluster.yaml', 'current-context: x\ncontexts:\n- name: x\n  context: {cluster: gone, user: u}\n'),
        /clusters has no entry named "gone"/,
      ],
      [
        bad('badctx.yaml', 'current-context: x\ncontexts:\n- name: x\n  context: [a]\n'),
        /contexts entry "x" has no context mapping/,
      ],
      [kubeconfig('noserver.yaml', ['server: 127.0.0.1:6443'], ['token: t']), /cluster.server is not an http\(s\) URL/],
      [
        kubeconfig('halfcert.yaml', [`server: https://127.0.0.1:${port}`], ['client-certificate: client.crt']),
        /client certificate or a client key, not both/,
      ],
      [
        kubeconfig('notoken.yaml', [`server: https://127.0.0.1:${port}`], ['tokenFile: missing-token']),
        /cannot read the token file .*missing-token: ENOENT/,
      ],
      [f('does-not-exist.yaml'), /cannot read kubeconfig .*does-not-exist.yaml: ENOENT/],
    ];
    for (const [path, msg] of cases) expect(() => loadApiTarget(path), path).toThrow(msg);
    expect(() => loadApiTarget(f('none.yaml'))).toThrow(KubeConfigError);
    // An empty user ("user:" and nothing under it) is no credentials, not an error.
    const anon = bad(
      'anon.yaml',
      `current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:1'}\nusers:\n- name: u\n  user:\n`,
    );
    await expect(loadApiTarget(anon).requestOptions()).resolves.toEqual({ headers: {} });
    expect(() => loadApiTarget(undefined, {})).toThrow(/KUBERNETES_SERVICE_HOST is unset.*--kubeconfig/);
  });
});

describe('exec plugin credentials, against the fake API server', () => {
  it('lists from the fake API server with the token the plugin prints', async () => {
    const api = new FakeApiServer();
    await api.start();
    try {
      const plugin = f('plugin.sh');
      writeFileSync(
        plugin,
        `#!/bin/sh\necho '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"fake-token"}}'\n`,
      );
      chmodSync(plugin, 0o755);
      const path = f('exec.yaml');
      writeFileSync(
        path,
        kubeconfigText(
          [`server: ${api.url}`, 'insecure-skip-tls-verify: true'],
          [
            'exec:',
            '  apiVersion: client.authentication.k8s.io/v1',
            `  command: ${plugin}`,
            '  interactiveMode: Never',
          ],
        ),
      );
      const target = loadApiTarget(path);
      expect(target.source).toMatch(/credentials from its exec plugin/);
      const page = await new KubeApi(target).listPage('/api/v1/services', {});
      expect(page.items).toEqual([]);
    } finally {
      await api.stop();
    }
  });

  /** A kubeconfig for `server` whose plugin prints `tokens[n]` on its nth run (the last one after), and its runs. */
  function countingPlugin(name: string, server: string, tokens: string[], expirationTimestamp?: string) {
    const plugin = f(`${name}.sh`);
    const count = f(`${name}.count`);
    const statuses = tokens.map((token) =>
      JSON.stringify({ token, ...(expirationTimestamp ? { expirationTimestamp } : {}) }),
    );
    const cases = statuses.map((status, i) => `  ${i + 1}) s='${status}' ;;`).join('\n');
    writeFileSync(
      plugin,
      `#!/bin/sh\necho run >> ${count}\nn=$(wc -l < ${count})\ncase $n in\n${cases}\n  *) s='${statuses.at(-1)}' ;;\nesac\n` +
        `echo "{\\"apiVersion\\":\\"client.authentication.k8s.io/v1\\",\\"kind\\":\\"ExecCredential\\",\\"status\\":$s}"\n`,
    );
    chmodSync(plugin, 0o755);
    const path = f(`${name}.yaml`);
    writeFileSync(path, kubeconfigText([`server: ${server}`], ['exec:', `  command: ${plugin}`]));
    const runs = (): number => {
      try {
        return readFileSync(count, 'utf8').trim().split('\n').length;
      } catch {
        return 0;
      }
    };
    return { path, runs };
  }

  it('a token the API server refuses (401) is dropped and the request made once more with a new one', async () => {
    const api = new FakeApiServer();
    await api.start();
    try {
      const { path, runs } = countingPlugin('revoked', api.url, ['revoked-token', 'fake-token']);
      const kube = new KubeApi(loadApiTarget(path));
      const page = await kube.listPage('/api/v1/services', {});
      expect(page.items).toEqual([]);
      expect(runs()).toBe(2);
      // The new token is held: no more runs.
      await kube.listPage('/api/v1/services', {});
      expect(runs()).toBe(2);
      expect(api.requests.filter((r) => r.resource === 'services')).toHaveLength(3);
    } finally {
      await api.stop();
    }
  });

  it('a token refused again after its renewal is a 401, without a third run', async () => {
    const api = new FakeApiServer();
    await api.start();
    try {
      const { path, runs } = countingPlugin('wrong', api.url, ['wrong-token']);
      const err = await new KubeApi(loadApiTarget(path)).listPage('/api/v1/services', {}).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ApiError);
      expect((err as ApiError).statusCode).toBe(401);
      expect(runs()).toBe(2);
    } finally {
      await api.stop();
    }
  });

  it('requests made together share one plugin run, also once the credential has expired', async () => {
    const { path, runs } = countingPlugin('herd', 'https://127.0.0.1:1', ['t'], '2020-01-01T00:00:00Z');
    const target = loadApiTarget(path);
    const together = () => Promise.all(Array.from({ length: 12 }, () => target.requestOptions()));
    await together();
    expect(runs()).toBe(1);
    await together();
    expect(runs()).toBe(2);
  });
});
