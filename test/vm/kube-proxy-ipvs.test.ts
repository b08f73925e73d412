// Real kube-proxy v1.20.2 in IPVS mode, inside the qemu VM (this kernel has no
// IPVS and no dummy link; Debian's has both), writing the real kube-ipvs0
// bindings, IPVS virtual servers and KUBE-* ipsets; two loops on those real
// rules, each with real traffic and ending with the compiled clbprobe's verdict:
//   1. community IPVS mode: the LB IP bound on kube-ipvs0, the LB's health
//      checks from that address dropped as martians -> hc-drop;
//   2. the TKE behaviour: the LB IP not bound (taken off kube-ipvs0 by hand,
//      kube-proxy runs with --ipvs-sync-period=1h so it stays off), pod -> LB IP
//      leaves the node and the LB loops it back -> L4-loop, active.
// The guest side is test/vm/kube-proxy-ipvs-scenario.sh.
//
// Where the API server runs: on the host's 127.0.0.1 (test/support/kube-control-plane.ts),
// reached from the guest through a virtio-serial port (test/vm/api-bridge.ts), not
// inside the VM: etcd + kube-apiserver take ~20 s to become ready natively on a loaded
// 2-core host and would take minutes under TCG (10-40x slower), and the bridge keeps the
// VM without any network interface (-nic none), so no guest packet can go anywhere but
// to that one loopback port.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterList, LAB, node1Ipsets, node1Rules } from '../../src/demo/lab.js';
import type { Finding } from '../../src/detect/types.js';
import type { NodeSnapshot } from '../../src/source/node-snapshot.js';
import { binary, type ControlPlane, startControlPlane } from '../support/kube-control-plane.js';
import { createList } from '../support/kube-objects.js';
import { natDiff } from '../support/nat-normalise.js';
import { expectSameTable } from '../unit/ipvs/same-table.js';
import { type ApiBridge, startApiBridge } from './api-bridge.js';
import { assertBuilt, type GuestResult, PROJECT_ROOT, runInGuest, sections } from './vm.js';

const GUEST_API_PORT = 6443;
const VIP_CLUSTER = '10.0.100.101';
const HC_PORT = 32001;
const GUEST_SERVER = `https://127.0.0.1:${GUEST_API_PORT}`;

let cp: ControlPlane | undefined;
let bridge: ApiBridge | undefined;
let run: GuestResult;
let s: Record<string, string>;
let handDir: string | undefined;

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** The loop lab's Service (ETP=Local), its slice and node1, plus an ETP=Cluster twin on its own VIP and NodePort. */
function objects(): Obj[] {
  const items = (clusterList('Local') as { items: Obj[] }).items;
  const svc = items.find((o) => o.kind === 'Service')!;
  svc.spec.healthCheckNodePort = HC_PORT;
  const twin = structuredClone(svc);
  twin.metadata.name = 'web-cluster';
  twin.spec.externalTrafficPolicy = 'Cluster';
  delete twin.spec.healthCheckNodePort;
  twin.spec.clusterIP = '10.96.0.81';
  twin.spec.clusterIPs = ['10.96.0.81'];
  twin.spec.ports[0].nodePort = LAB.nodePort + 1;
  twin.status.loadBalancer.ingress = [{ ip: VIP_CLUSTER }];
  const slice = structuredClone(items.find((o) => o.kind === 'EndpointSlice')!);
  slice.metadata.name = 'web-cluster-abcde';
  slice.metadata.labels['kubernetes.io/service-name'] = 'web-cluster';
  return [...items, twin, slice];
}

describe('real kube-proxy v1.20.2 in IPVS mode in a VM: the loops on its rules', () => {
  beforeAll(async () => {
    assertBuilt('dist/src/cli/main.js', ['src/cli/main.ts', 'src/cli/diagnose.ts', 'src/diagnose/run.ts']);
    const kubeProxy = binary('kube-proxy');
    cp = await startControlPlane();
    cp.kubectl(['apply', '-f', join(PROJECT_ROOT, 'deploy/namespace.yaml')]);
    cp.kubectl(['apply', '-n', 'clbprobe', '-f', join(PROJECT_ROOT, 'deploy/rbac.yaml')]);
    await createList(cp, { items: objects() });
    bridge = await startApiBridge(cp.port);
    handDir = mkdtempSync(join(tmpdir(), 'cbkv-hand-'));
    writeFileSync(join(handDir, 'nat.rules'), node1Rules('Local'));
    writeFileSync(join(handDir, 'ipsets.save'), node1Ipsets('Local'));
    const env: Record<string, string> = {
      KUBE_PROXY: kubeProxy,
      PROXY_KUBECONFIG: cp.kubeconfig('kubeProxy', GUEST_SERVER),
      AGENT_KUBECONFIG: cp.kubeconfig('clbprobe', GUEST_SERVER),
      API_PORT: String(GUEST_API_PORT),
      VIP: LAB.vip,
      VIP_CLUSTER,
      NODE_PORT: String(LAB.nodePort),
      HC_PORT: String(HC_PORT),
      HAND_DIR: handDir,
    };
    const script =
      Object.entries(env)
        .map(([k, v]) => `export ${k}='${v}'`)
        .join('\n') +
      '\n' +
      readFileSync(join(PROJECT_ROOT, 'test/vm/kube-proxy-ipvs-scenario.sh'), 'utf8');
    run = await runInGuest(script, {
      timeoutS: 400,
      modules: [
        'ip_vs',
        'ip_vs_rr',
        'ip_vs_wrr',
        'ip_vs_sh',
        'dummy',
        'nf_conntrack',
        'nf_conntrack_netlink',
        'veth',
        'bridge',
        'br_netfilter',
      ],
      ports: { 'clbvm.api': bridge.socketPath },
    });
    s = sections(run.stdout);
    console.log(
      `kube-proxy IPVS VM: ${run.wallMs} ms wall (boot + scenario); kube-proxy ready: ${s['kube-proxy-ready']?.trim()}; guest ms at each step: ${s.timing?.trim().split('\n').join(' ')}; API bridge connections ${bridge.opened}`,
    );
    // The whole guest transcript (every tool's view, kube-proxy's log) for whoever reads a failure.
    mkdirSync(join(PROJECT_ROOT, 'test-artifacts'), { recursive: true });
    writeFileSync(
      join(PROJECT_ROOT, 'test-artifacts/kube-proxy-ipvs-guest.txt'),
      `${run.stdout}\n--- stderr\n${run.stderr}`,
    );
    if (run.code !== 0 || s.end === undefined) {
      throw new Error(
        `guest scenario failed (exit ${run.code}); stderr:\n${run.stderr.slice(-3000)}\nstdout:\n${run.stdout.slice(-6000)}`,
      );
    }
  }, 480_000);

  afterAll(async () => {
    bridge?.close();
    if (handDir) rmSync(handDir, { recursive: true, force: true });
    await cp?.stop();
  });

  describe("clbprobe's readers on kube-proxy's own IPVS state", () => {
    it('IPVS: the genl reader sees every virtual and real server exactly as ipvsadm shows them', () => {
      const ipvs = snapshot().ipvs!;
      expectSameTable(ipvs, s);
      // What kube-proxy made of the two Services (so the comparison is not vacuous): the LB IPs,
      // ClusterIPs and a NodePort per node address, all rr and masq to the one endpoint.
      const vss = ipvs.virtualServers.map(
        (v) =>
          `${v.protocol} ${v.address}:${v.port} ${v.scheduler} -> ${v.realServers.map((r) => `${r.address}:${r.port} ${r.forward}`).join(',')}`,
      );
      const to = `${LAB.serverPod}:${LAB.serverPort} masq`;
      for (const vs of [
        `${LAB.vip}:80`,
        `${VIP_CLUSTER}:80`,
        `${LAB.clusterIp}:80`,
        '10.96.0.81:80',
        `${LAB.node1}:${LAB.nodePort}`,
        `${LAB.node1}:${LAB.nodePort + 1}`,
      ]) {
        expect(vss).toContain(`TCP ${vs} rr -> ${to}`);
      }
    });

    it('kube-ipvs0: the address reader sees the addresses and the link state ip shows', () => {
      const ipvs0 = snapshot().addresses!.interfaces.find((i) => i.name === 'kube-ipvs0')!;
      expect(ipvs0).toMatchObject({ isKubeIpvs: true, kind: 'dummy' });
      const shown = [...s['bound-addresses']!.matchAll(/ inet (\S+)\/(\d+) /g)].map((m) => `${m[1]}/${m[2]}`);
      expect(ipvs0.addresses.map((a) => `${a.address}/${a.prefixLen}`).sort()).toEqual(shown.sort());
      expect(shown).toEqual(expect.arrayContaining([`${LAB.vip}/32`, `${VIP_CLUSTER}/32`, `${LAB.clusterIp}/32`]));
      // kube-proxy never sets kube-ipvs0 up; the reader must say what the link says.
      expect(ipvs0.up).toBe(/<[^>]*\bUP\b[^>]*>/.test(s['kube-ipvs0-link']!));
    });

    it('ipsets: the reader sees every KUBE-* set, its type and its members as ipset save prints them', () => {
      const shown = new Map<string, { type: string; members: string[] }>();
      for (const line of s.ipset!.split('\n')) {
        const c = /^create (\S+) (\S+)/.exec(line);
        if (c) shown.set(c[1]!, { type: c[2]!, members: [] });
        const a = /^add (\S+) (\S+)/.exec(line);
        if (a) shown.get(a[1]!)!.members.push(a[2]!);
      }
      const read = snapshot().nat!.ipsets!;
      expect(read.warnings).toEqual([]);
      expect(new Map(read.sets.map((x) => [x.name, { type: x.type, members: x.members.map((m) => m.entry) }]))).toEqual(
        shown,
      );
      const members = (name: string) => shown.get(name)?.members.sort();
      expect(members('KUBE-LOAD-BALANCER')).toEqual([`${LAB.vip},tcp:80`, `${VIP_CLUSTER},tcp:80`].sort());
      expect(members('KUBE-LOAD-BALANCER-LOCAL')).toEqual([`${LAB.vip},tcp:80`]);
      expect(members('KUBE-NODE-PORT-TCP')).toEqual([String(LAB.nodePort), String(LAB.nodePort + 1)]);
      expect(members('KUBE-NODE-PORT-LOCAL-TCP')).toEqual([String(LAB.nodePort)]);
      expect(shown.get('KUBE-NODE-PORT-TCP')!.type).toBe('bitmap:port');
    });

    it('nat: the IPVS-mode chains are read and named as such', () => {
      const snap = snapshot();
      expect(snap.sources.filter((x) => !x.available).map((x) => x.source)).toEqual(['nft']);
      const nat = snap.nat!.v4!.tables.find((t) => t.name === 'nat')!;
      expect(nat.chains.map((c) => c.name)).toEqual(
        expect.arrayContaining(['KUBE-SERVICES', 'KUBE-LOAD-BALANCER', 'KUBE-NODE-PORT', 'KUBE-POSTROUTING']),
      );
      const proxyMode = diagnosis('bound-diagnose').findings.find(
        (f) => f.mechanism === 'proxy-mode' && f.service.name === 'web',
      )!;
      expect(proxyMode.summary).toContain('kube-proxy IPVS mode binding LB IPs on kube-ipvs0 (community)');
    });
  });

  it('the guest has no interface backed by a device: nothing leaves the VM but the API bridge', () => {
    const links = s['guest-links']!.trim().split('\n');
    expect(links).toContain('lo virtual');
    expect(links.filter((l) => !l.endsWith(' virtual'))).toEqual([]);
  });

  it("the demo's hand-written IPVS-mode node1 (src/demo/lab.ts) is what kube-proxy wrote: nat rules and ipsets, normalised", () => {
    // Same tools on both sides (iptables-save, ipset save in the guest); the real side also holds
    // the ETP=Cluster twin and the API server's own Service, which the demo does not have.
    expect(natDiff(s['hand-nat']!, s.nat!, { ignoreServices: ['default/kubernetes', 'lab/web-cluster'] })).toEqual([]);
    const notInDemo = new RegExp(
      `^(${VIP_CLUSTER.replaceAll('.', '\\.')},|10\\.96\\.0\\.81,|10\\.96\\.0\\.1,|${LAB.nodePort + 1}$)`,
    );
    expect(ipsetView(s['hand-ipset']!)).toEqual(ipsetView(s.ipset!, notInDemo));
  });

  describe('1. community IPVS mode: the LB IP bound on kube-ipvs0', () => {
    it('pod -> LB IP stays on the node: IPVS answers it locally', () => {
      expect(s['bound-connect']).toContain('server-pod');
    });

    it("the LB's health check from its VIP is dropped as a martian; from its own address it is answered", () => {
      expect(s['bound-hc-vip']).not.toContain('HTTP');
      expect(s['bound-hc-vip']).toMatch(/curl: \((7|28)\)/);
      expect(Number(/in_martian_src \+(\d+)/.exec(s['bound-martians']!)?.[1])).toBeGreaterThan(0);
      expect(s['bound-martians']).toContain(`martian source ${LAB.node1} from ${LAB.vip}, on dev eth0`);
      expect(s['bound-hc-lb']).toContain('HTTP 200');
      expect(s['bound-hc-lb']).toMatch(/"localEndpoints": 1/);
    });

    it('clbprobe diagnose (compiled, in the VM, through the real API) says hc-drop', () => {
      const d = diagnosis('bound-diagnose');
      const hc = d.findings.find((f) => f.mechanism === 'hc-drop' && f.service.name === 'web');
      expect(hc).toMatchObject({ severity: 'risk' });
      expect(hc!.summary).toBe(
        `${LAB.vip} is bound on kube-ipvs0: LB health checks sent from ${LAB.vip} to this node (port ${HC_PORT}) are dropped as martians`,
      );
      expect(d.findings.filter((f) => f.severity === 'active')).toEqual([]);
      expect(s['bound-diagnose-exit']!.split('\n')[0]).toBe('0');
    });
  });

  describe('2. the TKE behaviour: the LB IP not bound (taken off kube-ipvs0 by hand, --ipvs-sync-period=1h)', () => {
    it('the VIP is off kube-ipvs0 and stays off while the loop is diagnosed', () => {
      for (const k of ['unbound-addresses', 'unbound-still-unbound']) {
        expect(s[k]).not.toContain(` ${LAB.vip}/32`);
        expect(s[k]).toContain(` ${VIP_CLUSTER}/32`);
      }
    });

    it("the LB's health check from its VIP now reaches kube-proxy's health server", () => {
      expect(s['unbound-hc-vip']).toContain('HTTP 200');
    });

    it('pod -> LB IP leaves the node, the LB loops it back, and the client never connects', () => {
      // Every try of the client pod timed out (timeout's 124), none connected.
      expect(s['unbound-connect']).not.toMatch(/connected|server-pod/);
      expect(s['unbound-connect']).toMatch(/^try 1: exit 124$/m);
      const ct = s['unbound-conntrack']!;
      expect(ct).toMatch(new RegExp(`src=${LAB.clientPod} dst=${LAB.vip} sport=(\\d+) dport=80 \\[UNREPLIED\\]`));
      expect(ct).toMatch(
        new RegExp(
          `src=${LAB.clientPod} dst=${LAB.node1} sport=\\d+ dport=${LAB.nodePort} .*src=${LAB.serverPod} dst=${LAB.clientPod} sport=${LAB.serverPort}`,
        ),
      );
    });

    it('clbprobe diagnose (compiled, in the VM, through the real API) says L4-loop, active', () => {
      const d = diagnosis('unbound-diagnose');
      const loop = d.findings.find((f) => f.mechanism === 'L4-loop' && f.service.name === 'web');
      expect(loop).toMatchObject({ severity: 'active' });
      expect(loop!.summary).toMatch(
        new RegExp(
          `came back from the LB to ${LAB.node1}:${LAB.nodePort} with the client's own source ${LAB.clientPod}`,
        ),
      );
      expect(loop!.path!.hops.map((h) => h.role)).toEqual(['client pod', 'LB VIP', 'node NodePort', 'server pod']);
      expect(d.findings.find((f) => f.mechanism === 'no-SNAT' && f.service.name === 'web')).toMatchObject({
        severity: 'active',
      });
      // The VIP was taken off by hand while the other LB IP stayed bound: that is drift, and said so.
      expect(d.findings.find((f) => f.mechanism === 'drift' && f.service.name === 'web')).toMatchObject({
        severity: 'risk',
      });
      expect(s['unbound-diagnose-exit']!.split('\n')[0]).toBe('1');
    });
  });
});

function snapshot(): NodeSnapshot {
  return JSON.parse(s.snapshot!) as NodeSnapshot;
}

function diagnosis(section: string): { findings: Finding[]; warnings: string[] } {
  const text = s[section];
  if (!text?.trim()) throw new Error(`guest printed no "${section}"; ${s[`${section}-exit`] ?? ''}`);
  return JSON.parse(text) as { findings: Finding[]; warnings: string[] };
}

/**
 * ipset save output as name -> "type options | sorted members", without the hash seed (initval,
 * random per set) and without the members matching `drop`.
 */
function ipsetView(save: string, drop?: RegExp): Record<string, string> {
  const sets: Record<string, { head: string; members: string[] }> = {};
  for (const line of save.split('\n')) {
    const c = /^create (\S+) (.*)$/.exec(line);
    if (c) sets[c[1]!] = { head: c[2]!.replace(/ initval 0x[0-9a-f]+/, ''), members: [] };
    const a = /^add (\S+) (\S+)/.exec(line);
    if (a && !drop?.test(a[2]!)) sets[a[1]!]!.members.push(a[2]!);
  }
  return Object.fromEntries(Object.entries(sets).map(([k, v]) => [k, `${v.head} | ${v.members.sort().join(' ')}`]));
}
