import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  findKubeProxy,
  MAX_KUBE_PROXY_CONFIG_BYTES,
  modeFromConfig,
  proxyModeOf,
} from '../../../src/bundle/kube-proxy.js';

const roots: string[] = [];
afterEach(() => roots.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));

/** A /proc-shaped tree: pid → argv, optional files under that process' root. */
function fakeProc(procs: Record<string, { argv: string[]; files?: Record<string, string> }>): string {
  const root = mkdtempSync(join(tmpdir(), 'cbb-proc-'));
  roots.push(root);
  mkdirSync(join(root, 'self'));
  for (const [pid, p] of Object.entries(procs)) {
    mkdirSync(join(root, pid, 'root'), { recursive: true });
    writeFileSync(join(root, pid, 'cmdline'), `${p.argv.join('\0')}\0`);
    for (const [path, text] of Object.entries(p.files ?? {})) {
      mkdirSync(join(root, pid, 'root', path, '..'), { recursive: true });
      writeFileSync(join(root, pid, 'root', path), text);
    }
  }
  return root;
}

// The config kube-proxy's DaemonSet mounts (kubeadm's ConfigMap), trimmed.
const KUBEADM_CONFIG = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
clusterCIDR: 10.244.0.0/16
ipvs:
  excludeCIDRs: null
  scheduler: ""
  strictARP: false
kind: KubeProxyConfiguration
mode: "ipvs"
`;

describe('kube-proxy mode discovery', () => {
  it('finds kube-proxy by argv[0] and reads --config inside its root (the container path)', () => {
    const root = fakeProc({
      '1': { argv: ['/sbin/init'] },
      '812': { argv: ['/usr/bin/containerd'] },
      '4242': {
        argv: ['/usr/local/bin/kube-proxy', '--config=/var/lib/kube-proxy/config.conf', '--hostname-override=node-a'],
        files: { 'var/lib/kube-proxy/config.conf': KUBEADM_CONFIG },
      },
    });
    expect(findKubeProxy(root)).toEqual({
      mode: 'ipvs',
      source: 'config file /var/lib/kube-proxy/config.conf: mode',
      pid: 4242,
      args: ['/usr/local/bin/kube-proxy', '--config=/var/lib/kube-proxy/config.conf', '--hostname-override=node-a'],
    });
  });

  it('prefers --proxy-mode; falls back to the default; says why when the config is unreadable', () => {
    expect(proxyModeOf(['--proxy-mode', 'ipvs', '--config=/x'], () => 'mode: iptables')).toEqual({
      mode: 'ipvs',
      source: '--proxy-mode flag',
    });
    expect(proxyModeOf(['--config', '/x'], () => 'mode: ""\n')).toMatchObject({
      mode: 'iptables',
      source: expect.stringMatching(/sets no mode/),
    });
    expect(proxyModeOf(['--config=/x'], () => undefined)).toEqual({ source: 'config file /x could not be read' });
    expect(proxyModeOf(['--v=2'], () => undefined)).toMatchObject({ mode: 'iptables' });
    expect(modeFromConfig('{"kind":"KubeProxyConfiguration",\n "mode": "nftables",\n "x": 1}')).toBe('nftables');
    expect(modeFromConfig('ipvs:\n  mode: x\nmode: ipvs # set by kubeadm\n')).toBe('ipvs');
  });

  it(`a --config file over ${MAX_KUBE_PROXY_CONFIG_BYTES >> 20} MiB is not read: the source says so, naming the file and the bound`, () => {
    const big = KUBEADM_CONFIG + '#'.repeat(MAX_KUBE_PROXY_CONFIG_BYTES + 1 - KUBEADM_CONFIG.length);
    const root = fakeProc({
      '4242': {
        argv: ['kube-proxy', '--config=/var/lib/kube-proxy/config.conf'],
        files: { 'var/lib/kube-proxy/config.conf': big },
      },
    });
    const file = join(root, '4242/root/var/lib/kube-proxy/config.conf');
    expect(findKubeProxy(root)).toEqual({
      source: `config file /var/lib/kube-proxy/config.conf could not be read: kube-proxy config file ${file} is larger than 1 MiB, the most clbprobe reads of it`,
      pid: 4242,
      args: ['kube-proxy', '--config=/var/lib/kube-proxy/config.conf'],
    });
    const atBound = fakeProc({
      '4243': {
        argv: ['kube-proxy', '--config=/ok.conf'],
        files: { 'ok.conf': big.slice(0, MAX_KUBE_PROXY_CONFIG_BYTES) },
      },
    });
    expect(findKubeProxy(atBound)).toMatchObject({ mode: 'ipvs', pid: 4243 });
  });

  it('explains when there is no kube-proxy process', () => {
    const root = fakeProc({ '1': { argv: ['/sbin/init'] } });
    expect(findKubeProxy(root).source).toMatch(/^no kube-proxy process in /);
    expect(findKubeProxy(join(root, 'missing')).source).toMatch(/^cannot list /);
  });
});
