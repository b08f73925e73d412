// readBundle on hand-made bundles: files an SRE saved with standard commands,
// assembled at run time from the captured fixtures of every module.
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseIpvsadm } from '../../../src/kernel/ipvs/ipvsadm-text.js';
import { parseIptablesSave } from '../../../src/kernel/nat/iptables-save.js';
import { BundleDirError, readBundle } from '../../../src/source/bundle-read.js';

const FX = join(import.meta.dirname, '../../fixtures');
const dirs: string[] = [];
afterEach(() => dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));

/** A bundle directory holding fixture files under bundle names (bundle name → fixture path relative to test/fixtures). */
function bundle(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'cbb-bundle-'));
  dirs.push(dir);
  for (const [name, from] of Object.entries(files)) copyFileSync(join(FX, from), join(dir, name));
  return dir;
}

const HANDMADE = {
  'ip-addr.json': 'text/ip-d-addr.json',
  'ip-route.json': 'text/ip-route.json',
  'ip6-route.json': 'text/ip-6-route.json',
  'ip-route-local.json': 'routes/gce-guest-agent.local.v4.json',
  'ip6-route-local.json': 'routes/gce-guest-agent.local.v6.json',
  'ipvsadm.txt': 'ipvs/ipvsadm-list.txt',
  'ipvsadm-stats.txt': 'ipvs/ipvsadm-stats.txt',
  'iptables-save.txt': 'nat/ipvs-1.28.v4.save',
  'ipset.txt': 'nat/ipvs-1.28.ipset-list.txt',
  'nft-ruleset.json': 'nft/ruleset-ipvs-1.28-iptables-nft.json',
  'conntrack.txt': 'text/proc-nf_conntrack.txt',
  'sysctl.txt': 'text/sysctl.txt',
  'cluster.json': 'bundles/tke-ipvs-unbound-l4-loop/cluster.json',
};

describe('readBundle on a hand-made bundle', () => {
  it('gives back every source, parsed by the modules that own each format', () => {
    const dir = bundle(HANDMADE);
    const r = readBundle(dir, { nodeName: 'node-a' });
    expect(r.warnings).toEqual([]);
    // An IPVS node has no kube-proxy nftables table: the nft source is absent (not present), not failed.
    expect(r.node.sources.filter((s) => !s.available && !s.notPresent)).toEqual([]);
    expect(r.node.sources.find((s) => s.source === 'nft')).toMatchObject({ available: false, notPresent: true });
    expect(r.node.addresses!.interfaces[0]!.name).toBe('kube-ipvs0');
    expect(r.routes).toMatchObject({ uplink: 'eth0', uplink6: 'eth0' });
    expect(r.routes!.podCidrRoutes.map((x) => x.dst)).toEqual(['10.244.1.0/24']);
    const ipvs = parseIpvsadm([{ source: 'x', text: readFileSync(join(FX, 'ipvs/ipvsadm-list.txt'), 'utf8') }]);
    expect(r.node.ipvs!.virtualServers.map((v) => `${v.address}:${v.port}`).sort()).toEqual(
      ipvs.virtualServers.map((v) => `${v.address}:${v.port}`).sort(),
    );
    expect(r.node.ipvs!.virtualServers.some((v) => v.stats !== undefined)).toBe(true);
    const v4 = parseIptablesSave(readFileSync(join(FX, 'nat/ipvs-1.28.v4.save'), 'utf8'), { source: 'x', family: 4 });
    expect(r.node.nat!.backend).toBe('legacy');
    expect(r.node.nat!.v4!.tables.map((t) => t.rules.length)).toEqual(v4.tables.map((t) => t.rules.length));
    expect(r.node.nat!.ipsets!.sets.map((s) => s.name)).toContain('KUBE-LOAD-BALANCER-LOCAL');
    expect(r.node.conntrack!.entries).toHaveLength(14);
    expect(r.node.conntrack!.summary.byProto.tcp).toBeGreaterThan(0);
    expect(r.sysctls!.rpFilter.eth0).toBe(2);
    expect(r.cluster!.services.map((s) => `${s.namespace}/${s.name}`).sort()).toEqual(['shop/api', 'shop/web']);
    expect(r.cluster!.node?.name).toBe('node-a');
    expect(r.nodeName).toEqual({ name: 'node-a', from: 'given' });
  });

  it("finds the node by its address when no name is given, and marks that node's endpoints local", () => {
    const dir = bundle(HANDMADE);
    const items = JSON.parse(readFileSync(join(dir, 'ip-addr.json'), 'utf8')) as {
      ifname: string;
      addr_info: object[];
    }[];
    items
      .find((i) => i.ifname === 'eth0')!
      .addr_info.push({ family: 'inet', local: '10.0.3.11', prefixlen: 24, scope: 'global' });
    writeFileSync(join(dir, 'ip-addr.json'), JSON.stringify(items));
    const r = readBundle(dir);
    expect(r.nodeName?.name).toBe('node-a');
    expect(r.nodeName?.from).toMatch(/10\.0\.3\.11/);
    expect(r.cluster!.services.some((s) => s.endpoints.some((e) => e.local))).toBe(true);
  });

  it('without a node name nor a matching address, says so and keeps going', () => {
    const r = readBundle(bundle(HANDMADE));
    expect(r.warnings.join('\n')).toMatch(/cluster\.json: no Node has an address of this node/);
    expect(r.cluster!.services.every((s) => s.endpoints.every((e) => !e.local))).toBe(true);
  });

  it('picks the xtables backend as the live reader does when both backends were saved', () => {
    const dir = bundle({
      'iptables-legacy-save.txt': 'nat/iptables-1.21-legacy.v4.save',
      'iptables-nft-save.txt': 'nat/iptables-1.29-nft.v4.save',
      'ip6tables-nft-save.txt': 'nat/iptables-1.29-nft.v6.save',
    });
    const r = readBundle(dir);
    expect(r.node.nat!.backend).toBe('nft');
    expect(r.node.nat!.backendChoice.reason).toMatch(/KUBE-IPTABLES-HINT|rule lines/);
    expect(r.node.nat!.v4!.source).toBe(join(dir, 'iptables-nft-save.txt'));
    expect(r.node.nat!.v6!.family).toBe(6);
  });

  it('reads a single iptables-save.txt of the nft backend by its header', () => {
    const r = readBundle(bundle({ 'iptables-save.txt': 'nat/iptables-1.29-nft.v4.save' }));
    expect(r.node.nat!.backend).toBe('nft');
  });
});

describe('readBundle with broken files: a warning naming file and line, the rest still read', () => {
  it('truncated iptables-save, broken cluster JSON, garbage conntrack, bad ip JSON, bad ipvsadm', () => {
    const dir = bundle(HANDMADE);
    const save = readFileSync(join(dir, 'iptables-save.txt'), 'utf8');
    writeFileSync(join(dir, 'iptables-save.txt'), save.slice(0, Math.floor(save.length * 0.6)));
    const cluster = readFileSync(join(dir, 'cluster.json'), 'utf8');
    writeFileSync(join(dir, 'cluster.json'), cluster.slice(0, Math.floor(cluster.length / 2)));
    writeFileSync(join(dir, 'conntrack.txt'), 'this is not\nconntrack output\n');
    writeFileSync(join(dir, 'ip6-route.json'), '[{"dst":"default"');
    writeFileSync(
      join(dir, 'ipvsadm.txt'),
      'IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\nTCP  nonsense\n',
    );
    const r = readBundle(dir, { nodeName: 'node-a' });
    const w = r.warnings.join('\n');
    expect(w).toMatch(new RegExp(`${dir}/iptables-save\\.txt:\\d+: `));
    expect(w).toMatch(new RegExp(`${dir}/cluster\\.json:\\d+:\\d+: not valid JSON`));
    expect(w).toMatch(new RegExp(`${dir}/conntrack\\.txt:1: not conntrack -L`));
    expect(w).toMatch(new RegExp(`${dir}/ip6-route\\.json:1: not valid JSON`));
    expect(w).toMatch(new RegExp(`${dir}/ipvsadm\\.txt:3: `));
    const unavailable = r.node.sources.filter((s) => !s.available && !s.notPresent).map((s) => s.source);
    expect(unavailable.sort()).toEqual(['cluster', 'conntrack', 'routes']);
    // What was fine is still there.
    expect(r.node.addresses!.interfaces.length).toBeGreaterThan(0);
    expect(r.node.nat!.v4!.tables.length).toBeGreaterThan(0);
    expect(r.node.ipvs!.virtualServers.length).toBeGreaterThan(0); // from ipvsadm-stats.txt
    expect(r.sysctls).toBeDefined();
    expect(r.cluster).toBeUndefined();
  });

  it('names the missing files and the manifest reason for them', () => {
    const dir = bundle({ 'sysctl.txt': 'text/sysctl.txt' });
    writeFileSync(
      join(dir, 'manifest.json'),
      JSON.stringify({
        format: 'clbprobe-bundle/1',
        clbprobeVersion: '0.1.0',
        nodeName: 'node-b',
        hostname: 'node-b',
        startedAt: '2026-01-01T00:00:00.000Z',
        endedAt: '2026-01-01T00:00:01.000Z',
        files: [
          { command: 'ipvsadm-save -n', durationMs: 0, skipped: true, error: 'IPVS is not loaded in this kernel' },
        ],
      }),
    );
    const r = readBundle(dir);
    expect(r.node.hostname).toBe('node-b');
    expect(r.node.takenAt).toBe('2026-01-01T00:00:00.000Z');
    const why = Object.fromEntries(r.node.sources.filter((s) => !s.available).map((s) => [s.source, s.reason]));
    expect(why.ipvs).toBe('ipvsadm-save.txt not in the bundle: ipvsadm-save -n: IPVS is not loaded in this kernel');
    expect(why.addresses).toMatch(/^ip-addr\.json not in the bundle/);
    expect(Object.keys(why).sort()).toEqual([
      'addresses',
      'cluster',
      'conntrack',
      'dns',
      'ipset',
      'ipvs',
      'local-routes',
      'nat',
      'nft',
      'routes',
    ]);
    // No cluster view, so no hostname-only LB to have answers for: absent, saying which file.
    expect(why.dns).toMatch(/^dns-lookups\.json not in the bundle/);
    expect(why.nft).toMatch(/^nft-ruleset\.json not in the bundle/);
  });

  it('warns that a file kept from a failed command may be incomplete', () => {
    const dir = bundle({ 'iptables-save.txt': 'nat/iptables-1.21-legacy.v4.save' });
    const manifest = { format: 'clbprobe-bundle/1', nodeName: 'n', hostname: 'n', startedAt: 'x', endedAt: 'x' };
    const files = [
      {
        file: 'iptables-save.txt',
        command: 'iptables-save',
        exitStatus: null,
        durationMs: 30000,
        error: 'timed out after 30000 ms',
      },
    ];
    writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ ...manifest, files }));
    expect(readBundle(dir).warnings).toEqual([
      `${dir}/iptables-save.txt: written by \`iptables-save\`, which failed (timed out after 30000 ms): it may be incomplete`,
    ]);
  });

  it('a cluster.json that collect could list only in part: a warning, and the cluster source down saying why', () => {
    const dir = bundle({ 'cluster.json': 'bundles/tke-ipvs-unbound-l4-loop/cluster.json' });
    const manifest = { format: 'clbprobe-bundle/1', nodeName: 'node-a', hostname: 'n', startedAt: 'x', endedAt: 'x' };
    const error = 'EndpointSlice list: GET /apis/discovery.k8s.io/v1/endpointslices: 410 Expired';
    const command = 'list Services, EndpointSlices, Ingresses, Nodes from the API (in-cluster)';
    const files = [{ file: 'cluster.json', command, durationMs: 12, size: 100, error, incomplete: true }];
    writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ ...manifest, files }));
    const r = readBundle(dir);
    expect(r.warnings).toContain(`${dir}/cluster.json: written by \`${command}\`, which partly failed (${error})`);
    expect(r.node.sources.find((s) => s.source === 'cluster')).toMatchObject({
      available: false,
      reason: `${dir}/cluster.json is incomplete: ${error}`,
    });
    // What could be listed is still read.
    expect(r.cluster?.services.length).toBeGreaterThan(0);
  });

  it('a broken manifest is a warning; a missing directory is the one error', () => {
    const dir = bundle({ 'sysctl.txt': 'text/sysctl.txt' });
    writeFileSync(join(dir, 'manifest.json'), '{"format":');
    const r = readBundle(dir);
    expect(r.warnings[0]).toMatch(new RegExp(`^${dir}/manifest\\.json: not valid JSON.*; read without it$`));
    expect(() => readBundle(join(dir, 'nope'))).toThrow(BundleDirError);
    expect(() => readBundle(join(dir, 'sysctl.txt'))).toThrow(/not a directory/);
  });
});
