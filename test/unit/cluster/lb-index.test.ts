// The one LB-Service index the agent's Service index and the detectors' context share: which
// Service ports each admits, and the lookups where the two read the same Services differently
// (VIPs with or without Ingress VIPs, NodePorts one or many, endpoints at a guessed or a known
// port, all or local ones). Checked case by case, and against the plain maps each side would
// build on its own, over generated views with shared keys.
import { describe, expect, it } from 'vitest';
import { ServiceIndex } from '../../../src/agent/service-index.js';
import { slicePort } from '../../../src/cluster/endpoints.js';
import { endpointPort, knownTargetPort, LbServiceIndex } from '../../../src/cluster/lb-index.js';
import type { ClusterView, ServiceView } from '../../../src/cluster/types.js';
import { buildContext } from '../../../src/detect/context.js';
import type { DiagnoseInput } from '../../../src/detect/types.js';

interface Spec {
  name: string;
  protocol?: string;
  port?: number;
  targetPort?: number | string;
  nodePort?: number;
  lb?: string[];
  hostnames?: string[];
  ingress?: string[];
  endpoints?: { address: string; port?: number; local?: boolean }[];
}

function svc(s: Spec): ServiceView {
  // Each endpoint at its own slice port (the view's form when the slices of a port disagree).
  const endpoints = (s.endpoints ?? []).map((e) => ({
    view: { address: e.address, local: e.local ?? false, ready: true },
    port: e.port,
  }));
  return {
    namespace: 'shop',
    name: s.name,
    protocol: s.protocol ?? 'TCP',
    port: s.port ?? 80,
    targetPort: s.targetPort ?? 8080,
    nodePort: s.nodePort,
    lbIngress: (s.lb ?? []).map((ip) => ({ ip, ipMode: 'VIP' })),
    lbHostnames: s.hostnames,
    ingressVips: (s.ingress ?? []).map((ip) => ({ ingress: 'shop/web', ip })),
    endpoints: endpoints.map((e) => e.view),
    endpointPorts: new Map(endpoints.map((e) => [e.view, e.port])),
  } as unknown as ServiceView;
}

const viewOf = (...services: ServiceView[]): ClusterView => ({ fresh: true, services, warnings: [] });
const names = (l: ServiceView[] | undefined) => l?.map((s) => s.name);

describe('LbServiceIndex', () => {
  it('admits LB IPs, Ingress VIPs and LB hostnames for the detectors, only addresses for the agent, in the view order', () => {
    const v = viewOf(
      svc({ name: 'host-only', hostnames: ['lb.example'] }),
      svc({ name: 'cluster-ip' }),
      svc({ name: 'ingress', ingress: ['203.0.113.9'] }),
      svc({ name: 'lb', lb: ['203.0.113.1'] }),
    );
    const lb = new LbServiceIndex(v);
    expect(names(lb.services)).toEqual(['host-only', 'ingress', 'lb']);
    expect(names(lb.addressed)).toEqual(['ingress', 'lb']);
  });

  it("a view of LB Services only: the view's own list, not copies", () => {
    const v = viewOf(svc({ name: 'a', lb: ['203.0.113.1'] }), svc({ name: 'b', ingress: ['203.0.113.9'] }));
    const lb = new LbServiceIndex(v);
    expect(lb.services).toBe(v.services);
    expect(lb.addressed).toBe(v.services);
  });

  it('VIPs: the agent counts Ingress VIPs at 80/443 TCP too, the detectors only own LB VIPs', () => {
    const lb = new LbServiceIndex(
      viewOf(svc({ name: 'web', port: 8000, lb: ['203.0.113.1'], ingress: ['203.0.113.9'] })),
    );
    expect(names(lb.vipServices('203.0.113.1', 'TCP', 8000))).toEqual(['web']);
    expect(names(lb.lbVipServices('203.0.113.1', 'TCP', 8000))).toEqual(['web']);
    expect(names(lb.vipServices('203.0.113.9', 'TCP', 443))).toEqual(['web']);
    expect(lb.vipServices('203.0.113.9', 'UDP', 443)).toBeUndefined();
    expect(lb.vipServices('203.0.113.9', 'TCP', 8000)).toBeUndefined();
    expect(lb.lbVipServices('203.0.113.9', 'TCP', 443)).toBeUndefined();
    expect(names(lb.ingressVipServices('203.0.113.9'))).toEqual(['web']);
    expect(names(lb.lbIpServices('203.0.113.1'))).toEqual(['web']);
  });

  it('an address that is an own LB VIP at 80 and an Ingress VIP lists both Service ports in the view order', () => {
    const ingressFirst = new LbServiceIndex(
      viewOf(
        svc({ name: 'a', port: 9000, ingress: ['198.51.100.5'] }),
        svc({ name: 'b', port: 80, lb: ['198.51.100.5'] }),
      ),
    );
    expect(names(ingressFirst.vipServices('198.51.100.5', 'TCP', 80))).toEqual(['a', 'b']);
    expect(names(ingressFirst.vipServices('198.51.100.5', 'TCP', 443))).toEqual(['a']);
    const lbFirst = new LbServiceIndex(
      viewOf(
        svc({ name: 'b', port: 80, lb: ['198.51.100.5'] }),
        svc({ name: 'a', port: 9000, ingress: ['198.51.100.5'] }),
      ),
    );
    expect(names(lbFirst.vipServices('198.51.100.5', 'TCP', 80))).toEqual(['b', 'a']);
    expect(names(lbFirst.lbVipServices('198.51.100.5', 'TCP', 80))).toEqual(['b']);
  });

  it('NodePorts: the agent gets the addressed Service ports, the detectors the last one of all', () => {
    const lb = new LbServiceIndex(
      viewOf(
        svc({ name: 'x', nodePort: 30001, lb: ['203.0.113.1'] }),
        svc({ name: 'host-only', nodePort: 30001, hostnames: ['lb.example'] }),
        svc({ name: 'h2', nodePort: 30002, hostnames: ['lb2.example'] }),
      ),
    );
    expect(names(lb.nodePortServices('TCP', 30001))).toEqual(['x']);
    expect(lb.nodePortService('TCP', 30001)?.name).toBe('host-only');
    expect(lb.nodePortServices('TCP', 30002)).toBeUndefined();
    expect(lb.nodePortService('TCP', 30002)?.name).toBe('h2');
    expect(lb.nodePortService('UDP', 30002)).toBeUndefined();
  });

  it('endpoints: the agent keys all of them at a port always (Service port for a named targetPort), the detectors local ones at the known port', () => {
    const named = svc({
      name: 'named',
      port: 80,
      targetPort: 'http',
      lb: ['203.0.113.1'],
      endpoints: [{ address: '10.244.1.5', local: true }, { address: '10.244.2.5' }],
    });
    const sliced = svc({
      name: 'sliced',
      port: 81,
      targetPort: 'http',
      lb: ['203.0.113.2'],
      endpoints: [{ address: '10.244.1.6', port: 8443, local: true }],
    });
    const hostOnly = svc({
      name: 'host-only',
      hostnames: ['lb.example'],
      endpoints: [{ address: '10.244.1.7', local: true }],
    });
    const lb = new LbServiceIndex(viewOf(named, sliced, hostOnly));
    expect(endpointPort(named, named.endpoints[0]!)).toBe(80);
    expect(knownTargetPort(named, named.endpoints[0]!)).toBeUndefined();
    expect(names(lb.endpointServices('10.244.1.5', 'TCP', 80))).toEqual(['named']);
    expect(names(lb.endpointServices('10.244.2.5', 'TCP', 80))).toEqual(['named']);
    expect(lb.localEndpointServices('10.244.1.5', 'TCP', 80)).toBeUndefined();
    expect(names(lb.localEndpointServices('10.244.1.5', 'TCP', undefined))).toEqual(['named']);
    expect(lb.localEndpointServices('10.244.2.5', 'TCP', undefined)).toBeUndefined();
    expect(names(lb.endpointServices('10.244.1.6', 'TCP', 8443))).toEqual(['sliced']);
    expect(names(lb.localEndpointServices('10.244.1.6', 'TCP', 8443))).toEqual(['sliced']);
    expect(lb.endpointServices('10.244.1.7', 'TCP', 8080)).toBeUndefined();
    expect(names(lb.localEndpointServices('10.244.1.7', 'TCP', 8080))).toEqual(['host-only']);
  });

  it('is the one object the agent Service index and the detectors context read, when given', () => {
    const v = viewOf(svc({ name: 'web', lb: ['203.0.113.1'], hostnames: ['lb.example'] }));
    const lb = new LbServiceIndex(v);
    const local = { nodeIps: ['10.0.1.1'], ipvsIps: [], podCidrs: ['10.244.1.0/24'] };
    expect(new ServiceIndex(v, local, lb).lb).toBe(lb);
    expect(() => new ServiceIndex(viewOf(), local, lb)).toThrow(/another cluster view/);
    const input = { node: { sources: [] }, cluster: v, local, warnings: [] } as unknown as DiagnoseInput;
    expect(buildContext(input, lb).services).toBe(lb.services);
    // An index of another view is not used: the context builds its own.
    const other = new LbServiceIndex(viewOf(svc({ name: 'web', lb: ['203.0.113.1'] })));
    const ctx = buildContext(input, other);
    expect(ctx.services).not.toBe(other.services);
    expect(names(ctx.services)).toEqual(['web']);
  });
});

/** A small deterministic generator (mulberry32). */
function rng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('LbServiceIndex against the plain maps of each reader', () => {
  // Few addresses and ports, so that keys are shared across Services and kinds.
  const ips = ['203.0.113.1', '203.0.113.2', '10.244.1.5', '10.244.1.6', '2001:db8::1'];
  const ports = [80, 443, 8080, 30001];
  for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
    it(`seed ${seed}: every lookup answers as the reader's own map would`, () => {
      const r = rng(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
      const some = <T>(xs: readonly T[]): T[] => xs.filter(() => r() < 0.3);
      const services = Array.from({ length: 25 }, (_, i) =>
        svc({
          name: `s${i}`,
          protocol: pick(['TCP', 'TCP', 'UDP']),
          port: pick(ports),
          targetPort: pick([8080, 'http']),
          nodePort: r() < 0.6 ? pick([30001, 30002]) : undefined,
          lb: some(ips),
          ingress: some(ips),
          hostnames: r() < 0.3 ? ['lb.example'] : undefined,
          endpoints: some(ips).map((address) => ({
            address,
            port: r() < 0.5 ? pick(ports) : undefined,
            local: r() < 0.5,
          })),
        }),
      );
      const lb = new LbServiceIndex(viewOf(...services));

      // The agent's own maps: VIP (own + Ingress at 80/443), NodePort, endpoint, over Service ports with an address.
      const agentSvcs = services.filter((s) => s.lbIngress.length > 0 || s.ingressVips.length > 0);
      const vip = new Map<string, string[]>();
      const np = new Map<string, string[]>();
      const ep = new Map<string, string[]>();
      const add = (m: Map<string, string[]>, k: string, s: ServiceView) => m.set(k, [...(m.get(k) ?? []), s.name]);
      for (const s of agentSvcs) {
        for (const i of s.lbIngress) add(vip, `${i.ip}|${s.protocol}|${s.port}`, s);
        for (const iv of s.ingressVips) for (const p of [80, 443]) add(vip, `${iv.ip}|TCP|${p}`, s);
        if (s.nodePort) add(np, `${s.protocol}|${s.nodePort}`, s);
        for (const e of s.endpoints)
          add(
            ep,
            `${e.address}|${s.protocol}|${slicePort(s, e) ?? (typeof s.targetPort === 'number' ? s.targetPort : s.port)}`,
            s,
          );
      }
      // The detectors' own maps, over Service ports with an address or a hostname.
      const detSvcs = services.filter(
        (s) => s.lbIngress.length > 0 || s.ingressVips.length > 0 || s.lbHostnames !== undefined,
      );
      const lbVip = new Map<string, string[]>();
      const lbIp = new Map<string, string[]>();
      const ingVip = new Map<string, string[]>();
      const np1 = new Map<string, string>();
      const localEp = new Map<string, string[]>();
      for (const s of detSvcs) {
        for (const i of s.lbIngress) {
          add(lbVip, `${i.ip}|${s.protocol}|${s.port}`, s);
          add(lbIp, i.ip, s);
        }
        for (const iv of s.ingressVips) add(ingVip, iv.ip, s);
        if (s.nodePort) np1.set(`${s.protocol}|${s.nodePort}`, s.name);
        for (const e of s.endpoints)
          if (e.local)
            add(
              localEp,
              `${e.address}|${s.protocol}|${slicePort(s, e) ?? (typeof s.targetPort === 'number' ? s.targetPort : '')}`,
              s,
            );
      }

      expect(names(lb.addressed)).toEqual(agentSvcs.map((s) => s.name));
      expect(names(lb.services)).toEqual(detSvcs.map((s) => s.name));
      let asked = 0;
      for (const ip of ips) {
        expect(names(lb.lbIpServices(ip))).toEqual(lbIp.get(ip));
        expect(names(lb.ingressVipServices(ip))).toEqual(ingVip.get(ip));
        for (const proto of ['TCP', 'UDP']) {
          for (const port of [...ports, 30002]) {
            asked++;
            expect(names(lb.vipServices(ip, proto, port))).toEqual(vip.get(`${ip}|${proto}|${port}`));
            expect(names(lb.lbVipServices(ip, proto, port))).toEqual(lbVip.get(`${ip}|${proto}|${port}`));
            expect(names(lb.endpointServices(ip, proto, port))).toEqual(ep.get(`${ip}|${proto}|${port}`));
            expect(names(lb.localEndpointServices(ip, proto, port))).toEqual(localEp.get(`${ip}|${proto}|${port}`));
            expect(names(lb.nodePortServices(proto, port))).toEqual(np.get(`${proto}|${port}`));
            expect(lb.nodePortService(proto, port)?.name).toEqual(np1.get(`${proto}|${port}`));
          }
          expect(names(lb.localEndpointServices(ip, proto, undefined))).toEqual(localEp.get(`${ip}|${proto}|`));
        }
      }
      expect(asked).toBe(ips.length * 2 * 5);
      // The generator made shared keys of each kind (or the comparison would show little).
      expect([...vip.values()].some((l) => l.length > 1)).toBe(true);
      expect([...np.values()].some((l) => l.length > 1)).toBe(true);
      expect([...ep.values()].some((l) => l.length > 1)).toBe(true);
    });
  }
});
