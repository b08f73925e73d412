// `clbprobe collect` (the compiled CLI) on a real kernel: a "node" namespace
// with v4+v6 addresses, a CNI bridge, kube-ipvs0 with a VIP, some of IPVS-mode
// kube-proxy's NAT rules and ipsets for that VIP (ETP=Local; iptables-nft) and an
// IPv6 DNAT rule (ip6tables-nft), real TCP traffic and
// inserted NAT conntrack entries; the bundle it writes must read back
// (readBundle) into those addresses, rules and entries, matching what the live
// readers see. A second run without some tools on PATH must record them as
// missing in the manifest and still write everything else.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { release, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BundleManifest } from '../../src/bundle/manifest.js';
import { readAddresses } from '../../src/kernel/addresses.js';
import { dumpConntrack } from '../../src/kernel/conntrack/dump.js';
import type { ConntrackEntry } from '../../src/kernel/types.js';
import { type BundleRead, readBundle } from '../../src/source/bundle-read.js';
import { isRoot, Netns, vethPair } from '../support/netns.js';
import { CLI, requireBuiltCli } from '../support/run-cli.js';

const ROOT = join(import.meta.dirname, '../..');
const CLUSTER = join(ROOT, 'test/fixtures/bundles/tke-ipvs-unbound-l4-loop/cluster.json');

function collect(
  ns: Netns,
  out: string,
  env: NodeJS.ProcessEnv = process.env,
): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(
    process.execPath,
    [CLI, 'collect', '--netns', ns.name, '--out', out, '--cluster-file', CLUSTER, '--node-name', 'node-a'],
    { encoding: 'utf8', timeout: 60_000, env },
  );
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const tupleKey = (e: ConntrackEntry): string =>
  `${e.proto} ${e.orig.src}:${e.orig.sport ?? ''}>${e.orig.dst}:${e.orig.dport ?? ''} ${e.reply.src}:${e.reply.sport ?? ''}>${e.reply.dst}:${e.reply.dport ?? ''} z${e.zone} m${e.mark}`;

describe.skipIf(!isRoot)(
  'clbprobe collect on a namespace node, read back with readBundle (real kernel, compiled CLI)',
  () => {
    let node: Netns;
    let peer: Netns;
    let dir: string;
    let bundle: BundleRead;
    let manifest: BundleManifest;
    let live: ConntrackEntry[];

    beforeAll(async () => {
      requireBuiltCli();
      dir = mkdtempSync(join(tmpdir(), 'cbb-collect-'));
      node = Netns.create('cbb-node');
      peer = Netns.create('cbb-peer');
      vethPair(node, 'eth0', peer, 'eth0');
      node.sh(`
      ip addr add 10.77.0.2/24 dev eth0
      ip addr add fd77::2/64 dev eth0 nodad
      ip link add cni0 type bridge && ip link set cni0 up && ip addr add 10.244.1.1/24 dev cni0
      ip link add kube-ipvs0 type bridge && ip addr add 203.0.113.50/32 dev kube-ipvs0
      ip route add default via 10.77.0.1 dev eth0
      sysctl -qw net.ipv4.conf.eth0.rp_filter=2
      ipset create KUBE-LOAD-BALANCER hash:ip,port
      ipset add KUBE-LOAD-BALANCER 203.0.113.50,tcp:80
      ipset create KUBE-LOAD-BALANCER-LOCAL hash:ip,port
      ipset add KUBE-LOAD-BALANCER-LOCAL 203.0.113.50,tcp:80
      iptables-nft -t nat -N KUBE-SERVICES
      iptables-nft -t nat -N KUBE-LOAD-BALANCER
      iptables-nft -t nat -N KUBE-MARK-MASQ
      iptables-nft -t nat -A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
      iptables-nft -t nat -A KUBE-SERVICES -m comment --comment "Kubernetes service lb portal" -m set --match-set KUBE-LOAD-BALANCER dst,dst -j KUBE-LOAD-BALANCER
      iptables-nft -t nat -A KUBE-SERVICES -m set --match-set KUBE-LOAD-BALANCER dst,dst -j ACCEPT
      iptables-nft -t nat -A KUBE-LOAD-BALANCER -m comment --comment "Kubernetes service load balancer ip + port with externalTrafficPolicy=local" -m set --match-set KUBE-LOAD-BALANCER-LOCAL dst,dst -j RETURN
      iptables-nft -t nat -A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
      iptables-nft -t nat -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
      # kube-proxy's MASQUERADE rule is also what turns conntrack on in this namespace (the real traffic below).
      iptables-nft -t nat -N KUBE-POSTROUTING
      iptables-nft -t nat -A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
      iptables-nft -t nat -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
      iptables-nft -t nat -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
      iptables-nft -t nat -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
      ip6tables-nft -t nat -A PREROUTING -d fd77::50/128 -p tcp -m tcp --dport 443 -j DNAT --to-destination [fd00:244:1::7]:8443
      conntrack -I -p tcp -s 10.244.1.5 -d 203.0.113.50 --sport 40000 --dport 80 -r 203.0.113.50 -q 10.244.1.5 \
        --reply-port-src 80 --reply-port-dst 40000 --state SYN_SENT -t 300 2>/dev/null
      conntrack -I -p tcp -s 10.244.1.5 -d 10.77.0.2 --sport 40000 --dport 30080 -r 10.244.1.7 -q 10.244.1.5 \
        --reply-port-src 8080 --reply-port-dst 40000 --state ESTABLISHED -u SEEN_REPLY,ASSURED -t 300 2>/dev/null
      conntrack -I -p tcp -s 203.0.113.50 -d 203.0.113.50 --sport 50000 --dport 80 -r 10.244.2.9 -q 203.0.113.50 \
        --reply-port-src 8080 --reply-port-dst 50000 --state SYN_SENT -t 300 -w 7 2>/dev/null
    `);
      peer.sh('ip addr add 10.77.0.1/24 dev eth0');
      // Real traffic: one TCP exchange between the veth peers (busybox nc both ends).
      peer.sh('(busybox nc -l -p 8080 -e /bin/cat >/dev/null 2>&1 &) ; sleep 0.3');
      node.sh('echo hello | busybox nc -w 2 10.77.0.1 8080 >/dev/null || true');

      // Entries present, in the same state, both before and after the collect must be in the bundle. The kernel adds
      // some on its own at any time (IGMP reports are sent at a random delay after a multicast
      // join, seen once in CI), and those may come after the collect.
      const before: ConntrackEntry[] = [];
      await dumpConntrack((b) => void before.push(...b), { netns: node.path });
      const run = collect(node, dir);
      if (run.status !== 0) throw new Error(`collect exited ${run.status}: ${run.stderr}`);
      const after: ConntrackEntry[] = [];
      await dumpConntrack((b) => void after.push(...b), { netns: node.path });
      // An entry whose state changed while collect ran (the nc exchange closing on a loaded box) may be in
      // the bundle in either state: only entries unchanged from before to after are compared.
      const stateOf = (e: ConntrackEntry) => `${e.tcpState} ${[...e.statusFlags].sort().join(',')}`;
      const earlier = new Map(before.map((e) => [e.id, stateOf(e)]));
      live = after.filter((e) => earlier.get(e.id) === stateOf(e));
      manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as BundleManifest;
      bundle = readBundle(dir);
    });
    afterAll(() => {
      node?.delete();
      peer?.delete();
      Netns.deleteAll();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('writes a manifest with every step, its command, status, duration and size', () => {
      expect(manifest).toMatchObject({
        format: 'clbprobe-bundle/1',
        nodeName: 'node-a',
        kernel: release(),
        netns: node.path,
      });
      expect(Date.parse(manifest.endedAt)).toBeGreaterThanOrEqual(Date.parse(manifest.startedAt));
      const byFile = Object.fromEntries(manifest.files.filter((f) => f.file).map((f) => [f.file!, f]));
      for (const f of [
        'ip-addr.json',
        'ip-route.json',
        'ip6-route.json',
        'iptables-nft-save.txt',
        'ip6tables-nft-save.txt',
        'ipset.txt',
        'conntrack.txt',
        'sysctl.txt',
        'uname.txt',
        'cluster.json',
      ]) {
        expect(byFile[f], f).toBeDefined();
        expect(byFile[f]!.error, f).toBeUndefined();
        expect(byFile[f]!.size, f).toBe(readFileSync(join(dir, f)).length);
      }
      expect(byFile['ip-addr.json']!.command).toBe(`nsenter --net=${node.path} -- ip -j -d addr`);
      expect(byFile['ip-addr.json']!.exitStatus).toBe(0);
      // This kernel has no IPVS: said so, not failed.
      expect(manifest.files.find((f) => f.command.startsWith('ipvsadm'))).toMatchObject({
        skipped: true,
        error: expect.stringMatching(/IPVS is not loaded/),
      });
    });

    it('reads back the addresses the live netlink reader sees, kube-ipvs0 first', async () => {
      const liveAddr = await readAddresses({ netns: node.path });
      const shape = (
        ifs: {
          name: string;
          isKubeIpvs: boolean;
          addresses: { address: string; prefixLen: number; family: number; scope: unknown }[];
        }[],
      ) =>
        ifs.map((i) => ({
          name: i.name,
          kube: i.isKubeIpvs,
          addrs: i.addresses.map((a) => `${a.address}/${a.prefixLen} ${a.scope}`).sort(),
        }));
      expect(shape(bundle.node.addresses!.interfaces)).toEqual(shape(liveAddr.snapshot!.interfaces));
      expect(bundle.node.addresses!.interfaces[0]).toMatchObject({
        name: 'kube-ipvs0',
        isKubeIpvs: true,
        kind: 'bridge',
      });
      expect(bundle.routes).toMatchObject({ uplink: 'eth0' });
      expect(bundle.routes!.podCidrRoutes.map((r) => r.dst)).toEqual(['10.244.1.0/24']);
    });

    it('reads back the NAT rules and the ipset, with the nft backend chosen', () => {
      const nat = bundle.node.nat!;
      expect(nat.backend).toBe('nft');
      const rules = nat.v4!.tables.find((t) => t.name === 'nat')!.rules.map((r) => `${r.chain} ${r.spec}`);
      expect(rules).toContain(
        'KUBE-LOAD-BALANCER -m comment --comment "Kubernetes service load balancer ip + port with externalTrafficPolicy=local" -m set --match-set KUBE-LOAD-BALANCER-LOCAL dst,dst -j RETURN',
      );
      expect(rules).toContain('KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000');
      const rules6 = nat.v6!.tables.find((t) => t.name === 'nat')!.rules.map((r) => `${r.chain} ${r.spec}`);
      expect(rules6.join('\n')).toMatch(
        /PREROUTING -d fd77::50\/128 -p tcp -m tcp --dport 443 -j DNAT --to-destination \[fd00:244:1::7\]:8443/,
      );
      const set = nat.ipsets!.sets.find((s) => s.name === 'KUBE-LOAD-BALANCER-LOCAL')!;
      expect(set.members.map((m) => m.entry)).toEqual(['203.0.113.50,tcp:80']);
    });

    it('reads back the conntrack entries the live reader sees (inserted NAT entries and real traffic)', () => {
      const got = bundle.node.conntrack!.entries!;
      const inserted = [
        'tcp 10.244.1.5:40000>203.0.113.50:80 203.0.113.50:80>10.244.1.5:40000 z0 m0',
        'tcp 10.244.1.5:40000>10.77.0.2:30080 10.244.1.7:8080>10.244.1.5:40000 z0 m0',
        'tcp 203.0.113.50:50000>203.0.113.50:80 10.244.2.9:8080>203.0.113.50:50000 z7 m0',
      ];
      expect(got.map(tupleKey)).toEqual(expect.arrayContaining(inserted));
      expect(got.some((e) => e.orig.dst === '10.77.0.1' && e.orig.dport === 8080)).toBe(true);
      // Every entry still in the table afterwards was in the bundle, with the same id and state.
      const byId = new Map(got.map((e) => [e.id, e]));
      for (const e of live.filter((x) => x.timeoutS > 60)) {
        const b = byId.get(e.id);
        expect(b, tupleKey(e)).toBeDefined();
        expect(tupleKey(b!)).toBe(tupleKey(e));
        expect(b!.tcpState).toBe(e.tcpState);
        for (const flag of ['SEEN_REPLY', 'ASSURED', 'CONFIRMED'])
          expect(b!.statusFlags.includes(flag), flag).toBe(e.statusFlags.includes(flag));
      }
    });

    it("reads back the sysctls and the cluster view, with nothing unavailable but IPVS and nftables (not this node's modes)", () => {
      expect(bundle.sysctls!.rpFilter.eth0).toBe(2);
      expect(bundle.sysctls!.conntrack.max).toBeGreaterThan(0);
      expect(bundle.cluster!.services.map((s) => s.name).sort()).toEqual(['api', 'web']);
      expect(bundle.nodeName).toEqual({ name: 'node-a', from: 'given' });
      expect(bundle.node.kernel).toBe(release());
      // IPVS (this kernel has none) and nftables mode are absent, and no LB publishes only a
      // hostname: not in use, not failed.
      expect(bundle.node.sources.filter((s) => !s.available).map((s) => s.source)).toEqual(['ipvs', 'nft', 'dns']);
      expect(bundle.node.sources.find((s) => s.source === 'dns')).toMatchObject({
        notPresent: true,
        reason: 'no hostname-only LoadBalancer Service in the cluster view',
      });
      expect(bundle.node.sources.find((s) => s.source === 'nft')!.reason).toMatch(/kube-proxy|nftables/);
      expect(bundle.warnings).toEqual([]);
    });

    it('records missing tools in the manifest and still writes the rest', () => {
      const bin = mkdtempSync(join(tmpdir(), 'cbb-bin-'));
      const out = mkdtempSync(join(tmpdir(), 'cbb-collect-'));
      try {
        // Only iproute2, nsenter, sysctl and uname: no iptables, ipset or conntrack tools.
        for (const tool of ['ip', 'nsenter', 'sysctl', 'uname']) {
          const where = spawnSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).stdout.trim();
          symlinkSync(where, join(bin, tool));
        }
        const run = collect(node, out, { ...process.env, PATH: bin });
        expect(run.stderr).toBe('');
        expect(run.status).toBe(0);
        const m = JSON.parse(readFileSync(join(out, 'manifest.json'), 'utf8')) as BundleManifest;
        const errs = Object.fromEntries(
          m.files.map((f) => [f.command.replace(`nsenter --net=${node.path} -- `, ''), f.error]),
        );
        expect(errs['iptables-save']).toBe('nsenter: failed to execute iptables-save: No such file or directory');
        expect(errs['ipset save']).toMatch(/ipset/);
        expect(run.stdout).toMatch(/problem: .*ipset save/);
        const r = readBundle(out);
        expect(r.node.addresses!.interfaces.length).toBe(4);
        expect(r.node.conntrack!.entries!.length).toBeGreaterThanOrEqual(3); // our own reader needs no tool
        expect(r.sysctls!.rpFilter.eth0).toBe(2);
        const down = Object.fromEntries(r.node.sources.filter((s) => !s.available).map((s) => [s.source, s.reason]));
        expect(Object.keys(down).sort()).toEqual(['dns', 'ipset', 'ipvs', 'nat', 'nft']);
        expect(down.ipset).toMatch(/^ipset\.txt not in the bundle: .*ipset save: /);
      } finally {
        rmSync(bin, { recursive: true, force: true });
        rmSync(out, { recursive: true, force: true });
      }
    });

    it('without privileges: every refusal is recorded, no empty file poses as a table, exit 0', () => {
      const out = mkdtempSync(join(tmpdir(), 'cbb-collect-'));
      try {
        spawnSync('chown', ['65534:65534', out]);
        // This namespace's reads, as nobody, with no capabilities (read-only commands).
        const r = spawnSync(
          'ip',
          [
            'netns',
            'exec',
            node.name,
            'setpriv',
            '--reuid=65534',
            '--regid=65534',
            '--clear-groups',
            process.execPath,
            CLI,
            'collect',
            '--out',
            out,
          ],
          { encoding: 'utf8', timeout: 60_000 },
        );
        expect(r.stderr).toBe('');
        expect(r.status).toBe(0);
        const m = JSON.parse(readFileSync(join(out, 'manifest.json'), 'utf8')) as BundleManifest;
        const err = (cmd: string): string | undefined => m.files.find((f) => f.command === cmd)?.error;
        expect(err('iptables-nft-save')).toMatch(/Permission denied/);
        expect(err('ipset save')).toMatch(/not permitted/);
        expect(err('conntrack -L -o extended,id')).toMatch(
          /^clbprobe conntrack reader failed \(.*EPERM\); .*CAP_NET_ADMIN/,
        );
        expect(existsSync(join(out, 'conntrack.txt'))).toBe(false);
        const b = readBundle(out);
        expect(b.node.addresses!.interfaces.map((i) => i.name)).toContain('kube-ipvs0');
        const down = Object.fromEntries(b.node.sources.filter((s) => !s.available).map((s) => [s.source, s.reason]));
        expect(down.conntrack).toMatch(
          /^conntrack\.txt not in the bundle: conntrack -L -o extended,id: clbprobe conntrack reader failed/,
        );
        expect(Object.keys(down).sort()).toEqual(['cluster', 'conntrack', 'dns', 'ipset', 'ipvs', 'nat', 'nft']);
      } finally {
        rmSync(out, { recursive: true, force: true });
      }
    });
  },
);
