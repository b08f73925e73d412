// The agent's conntrack table over the lab's Service: which entries are kept,
// the loop pair, classification, outcomes on DESTROY, and resync pruning.
import { describe, expect, it } from 'vitest';
import { ConntrackTable, classifyEntry } from '../../../src/agent/conntrack-table.js';
import { ServiceIndex } from '../../../src/agent/service-index.js';
import { buildClusterView } from '../../../src/cluster/build.js';
import { classifyDocuments } from '../../../src/cluster/file.js';
import { clusterList, LAB } from '../../../src/demo/lab.js';
import type { ConntrackEntry } from '../../../src/kernel/types.js';

function index(): ServiceIndex {
  const { objects } = classifyDocuments([clusterList('Local')]);
  const view = buildClusterView(objects, { nodeName: LAB.node1Name });
  return new ServiceIndex(view, { nodeIps: [LAB.node1], ipvsIps: [], podCidrs: [LAB.podCidr] });
}

function entry(
  id: number,
  o: [string, number, string, number],
  r: [string, number, string, number],
  flags: string[] = [],
): ConntrackEntry {
  return {
    family: 4,
    proto: 'tcp',
    orig: { src: o[0], sport: o[1], dst: o[2], dport: o[3], protoNum: 6 },
    reply: { src: r[0], sport: r[1], dst: r[2], dport: r[3], protoNum: 6 },
    tcpState: flags.includes('SEEN_REPLY') ? 'ESTABLISHED' : 'SYN_SENT',
    status: flags.includes('SEEN_REPLY') ? 2 : 0,
    statusFlags: flags,
    timeoutS: 100,
    mark: 0,
    zone: 0,
    id,
  };
}

const out = entry(1, [LAB.clientPod, 40000, LAB.vip, 80], [LAB.vip, 80, LAB.clientPod, 40000]);
const back = entry(
  2,
  [LAB.clientPod, 40000, LAB.node1, LAB.nodePort],
  [LAB.serverPod, LAB.serverPort, LAB.clientPod, 40000],
);
const unrelated = entry(
  3,
  [LAB.clientPod, 40001, '192.0.2.1', 443],
  ['192.0.2.1', 443, LAB.node1, 40001],
  ['SEEN_REPLY'],
);

describe('agent conntrack table', () => {
  it('keeps only Service entries and pairs the two legs of the loop', () => {
    const t = new ConntrackTable(index());
    const now = Date.now();
    expect(t.upsert(unrelated, now)).toBe(false);
    t.upsert(out, now);
    expect(classifyEntry([...t.entries()][0]!)).toBe('not_snated');
    t.upsert(back, now);
    expect([...t.entries()].map(classifyEntry)).toEqual(['loopback_pair', 'loopback_pair']);
    expect(t.size).toBe(2);
  });

  it('pairs only a return leg the correlator would: not a ClusterIP flow DNATed here from the same socket', () => {
    const t = new ConntrackTable(index());
    const snatedOut = entry(4, [LAB.clientPod, 5060, LAB.vip, 80], [LAB.vip, 80, LAB.node1, 61000], ['SEEN_REPLY']);
    const toClusterIp = entry(
      5,
      [LAB.clientPod, 5060, LAB.clusterIp, 80],
      [LAB.serverPod, LAB.serverPort, LAB.clientPod, 5060],
      ['SEEN_REPLY'],
    );
    t.upsert(snatedOut, 0);
    t.upsert(toClusterIp, 0);
    expect([...t.entries()].map(classifyEntry)).toEqual(['healthy', 'healthy']);
    t.event('DESTROY', snatedOut, 1);
    expect([...t.outcomes.values()]).toEqual([
      { svc: expect.objectContaining({ service: 'web' }), replied: 1, unreplied: 0, loopback_pair: 0, not_snated: 0 },
    ]);
  });

  it('pairs a direct leg: the LB sent the connection straight to a local endpoint, not DNATed here', () => {
    const t = new ConntrackTable(index());
    const direct = entry(
      6,
      [LAB.clientPod, 40000, LAB.serverPod, LAB.serverPort],
      [LAB.serverPod, LAB.serverPort, LAB.clientPod, 40000],
    );
    t.upsert(out, 0);
    t.upsert(direct, 0);
    expect([...t.entries()].map(classifyEntry)).toEqual(['loopback_pair', 'loopback_pair']);
  });

  it('counts a finished VIP flow by outcome on DESTROY, not the return leg', () => {
    const t = new ConntrackTable(index());
    t.upsert(out, 0);
    t.upsert(back, 0);
    t.event('DESTROY', back, 1);
    t.event('DESTROY', out, 2);
    expect([...t.outcomes.values()]).toEqual([
      { svc: expect.objectContaining({ service: 'web' }), replied: 0, unreplied: 0, loopback_pair: 1, not_snated: 0 },
    ]);
  });

  it('a VIP flow kube-proxy DNATs to a local endpoint without masquerade never left the node: not not_snated', () => {
    const t = new ConntrackTable(index());
    const shortCircuited = entry(
      7,
      [LAB.clientPod, 41000, LAB.vip, 80],
      [LAB.serverPod, LAB.serverPort, LAB.clientPod, 41000],
      ['SEEN_REPLY'],
    );
    t.upsert(shortCircuited, 0);
    expect(classifyEntry([...t.entries()][0]!)).toBe('healthy');
    t.event('DESTROY', shortCircuited, 1);
    expect([...t.outcomes.values()]).toEqual([
      { svc: expect.objectContaining({ service: 'web' }), replied: 1, unreplied: 0, loopback_pair: 0, not_snated: 0 },
    ]);
  });

  it('at its cap refuses new entries, the legs of a loop too, and counts them and says so while full', () => {
    const t = new ConntrackTable(index(), 2);
    const healthy = (id: number, sport: number) =>
      entry(id, [LAB.clientPod, sport, LAB.vip, 80], [LAB.vip, 80, LAB.node1, sport], ['SEEN_REPLY']);
    t.upsert(healthy(21, 40021), 0);
    t.upsert(healthy(22, 40022), 0);
    expect(t.fullNote).toMatch(/^conntrack table full at 2 entries: 0 entries refused/);
    expect(t.upsert(out, 1)).toBe(false);
    expect(t.upsert(back, 1)).toBe(false);
    expect(t.upsert(unrelated, 1)).toBe(false);
    expect(t.dropped).toBe(2);
    expect(t.fullNote).toMatch(/2 entries refused since start/);
    t.event('DESTROY', healthy(21, 40021), 2);
    expect(t.fullNote).toBeUndefined();
    expect(t.dropped).toBe(2);
  });

  it('counts its changes (what the agent checks before reusing the lists made from it), not what it ignores', () => {
    const t = new ConntrackTable(index());
    const c0 = t.changes;
    t.upsert(unrelated, 0);
    t.event('DESTROY', unrelated, 1);
    expect(t.changes).toBe(c0);
    t.upsert(out, 2);
    const c1 = t.changes;
    expect(c1).toBeGreaterThan(c0);
    t.upsert(out, 3); // an update: its state may have moved
    expect(t.changes).toBeGreaterThan(c1);
    const c2 = t.changes;
    t.event('DESTROY', out, 4);
    expect(t.changes).toBeGreaterThan(c2);
    const c3 = t.changes;
    t.reindex(index());
    expect(t.changes).toBeGreaterThan(c3);
  });

  it('a resync drops entries whose DESTROY was lost and counts them as ended flows (no silent loss)', () => {
    const t = new ConntrackTable(index());
    t.upsert(out, 0);
    t.upsert(back, 1);
    const read = t.beginResync();
    t.upsert(back, 5);
    t.endResync(read);
    expect([...t.entries()].map((k) => k.entry.id)).toEqual([2]);
    expect([...t.outcomes.values()]).toEqual([
      { svc: expect.objectContaining({ service: 'web' }), replied: 0, unreplied: 0, loopback_pair: 1, not_snated: 0 },
    ]);
  });

  it('two full reads that overlap keep the live entries of each other and drop only what neither saw', () => {
    const t = new ConntrackTable(index());
    const flow = (id: number, sport: number) =>
      entry(id, [LAB.clientPod, sport, LAB.vip, 80], [LAB.vip, 80, LAB.node1, sport], ['SEEN_REPLY']);
    const [e1, e2, gone] = [flow(11, 40011), flow(12, 40012), flow(13, 40013)];
    for (const e of [e1, e2, gone]) t.upsert(e, 1000);
    const told: number[] = [];
    t.listeners.add((k) => told.push(k.entry.id));
    const readA = t.beginResync();
    t.upsert(e1, 2000);
    const readB = t.beginResync();
    t.upsert(e2, 2000);
    t.endResync(readA);
    t.upsert(e1, 3000);
    t.upsert(e2, 3000);
    t.endResync(readB);
    expect([...t.entries()].map((k) => [k.entry.id, k.firstSeenMs])).toEqual([
      [11, 1000],
      [12, 1000],
    ]);
    expect(told).toEqual([]);
    expect([...t.outcomes.values()]).toEqual([
      { svc: expect.objectContaining({ service: 'web' }), replied: 1, unreplied: 0, loopback_pair: 0, not_snated: 0 },
    ]);
  });

  it('two live flows with the same CTA_ID (a 32-bit hash in the kernel) are two entries, each ended by its own DESTROY', () => {
    const t = new ConntrackTable(index());
    const twin = entry(1, [LAB.clientPod, 40002, LAB.vip, 80], [LAB.vip, 80, LAB.clientPod, 40002], ['SEEN_REPLY']);
    const foreign = entry(1, [LAB.clientPod, 40003, '192.0.2.1', 443], ['192.0.2.1', 443, LAB.node1, 40003]);
    t.upsert(out, 0);
    t.upsert(foreign, 1);
    t.event('DESTROY', foreign, 2);
    expect([...t.entries()].map((k) => k.entry.orig.sport)).toEqual([40000]);
    expect(t.event('NEW', twin, 3)).toBe(true);
    expect([...t.entries()].map((k) => k.entry.orig.sport).sort()).toEqual([40000, 40002]);
    expect(t.size).toBe(2);
    t.event('DESTROY', twin, 4);
    expect([...t.entries()].map((k) => k.entry.orig.sport)).toEqual([40000]);
    expect([...t.outcomes.values()]).toEqual([
      { svc: expect.objectContaining({ service: 'web' }), replied: 0, unreplied: 0, loopback_pair: 0, not_snated: 1 },
    ]);
    const read = t.beginResync();
    t.upsert(out, 5);
    t.upsert(twin, 5);
    t.endResync(read);
    expect(t.size).toBe(2);
  });

  it('maps counter samples to the Service: NodePort wildcard and VIP', () => {
    const idx = index();
    const s = (kind: 'to_lb' | 'loop_return', target: string, port: number) =>
      idx
        .ofSample({ target, port, proto: 'tcp', kind, direction: 'ingress', packets: 1, bytes: 60 })
        .map((v) => v.name);
    expect(s('loop_return', '0.0.0.0', LAB.nodePort)).toEqual(['web']);
    expect(s('to_lb', LAB.vip, 80)).toEqual(['web']);
    expect(s('loop_return', '0.0.0.0', 31999)).toEqual([]);
  });

  it('a NodePort Service behind an Ingress VIP is a counter target: to_lb on the VIP at 80/443, loop_return on its NodePort', () => {
    const ingressVip = '10.0.200.1';
    const list = clusterList('Cluster') as { items: Record<string, unknown>[] };
    const svc = structuredClone(list.items.find((i) => i.kind === 'Service')!) as {
      metadata: { name: string };
      spec: { type: string; ports: { nodePort: number }[] };
      status?: unknown;
    };
    svc.metadata.name = 'api';
    svc.spec.type = 'NodePort';
    svc.spec.ports[0]!.nodePort = 30999;
    delete svc.status;
    const ingress = {
      apiVersion: 'networking.k8s.io/v1',
      kind: 'Ingress',
      metadata: { name: 'api', namespace: 'lab' },
      spec: {
        rules: [
          {
            http: {
              paths: [{ path: '/', pathType: 'Prefix', backend: { service: { name: 'api', port: { number: 80 } } } }],
            },
          },
        ],
      },
      status: { loadBalancer: { ingress: [{ ip: ingressVip }] } },
    };
    const { objects } = classifyDocuments([{ ...list, items: [...list.items, svc, ingress] }]);
    const idx = new ServiceIndex(buildClusterView(objects, { nodeName: LAB.node1Name }), {
      nodeIps: [LAB.node1],
      ipvsIps: [],
      podCidrs: [LAB.podCidr],
    });
    const s = (kind: 'to_lb' | 'loop_return', target: string, port: number) =>
      idx
        .ofSample({ target, port, proto: 'tcp', kind, direction: 'ingress', packets: 1, bytes: 60 })
        .map((v) => v.name);
    expect(idx.services.map((v) => v.name).sort()).toEqual(['api', 'web']);
    expect(s('to_lb', ingressVip, 443)).toEqual(['api']);
    expect(s('to_lb', ingressVip, 80)).toEqual(['api']);
    expect(s('to_lb', ingressVip, 8443)).toEqual([]);
    expect(s('loop_return', '0.0.0.0', 30999)).toEqual(['api']);
    const t = idx.targets();
    expect(
      t.vips
        .filter((v) => v.address === ingressVip)
        .map((v) => v.port)
        .sort(),
    ).toEqual([443, 80]);
    expect(t.nodePorts.map((n) => n.port)).toContain(30999);
    // A pod's connection to the Ingress VIP is a VIP flow of the backend Service.
    const toIngress = entry(9, [LAB.clientPod, 41000, ingressVip, 443], [ingressVip, 443, LAB.clientPod, 41000]);
    expect(idx.match(toIngress)).toMatchObject({ toVip: true, svcs: [{ name: 'api' }] });
    expect(idx.ours().vips).toContainEqual({ address: ingressVip, protoNum: 6, port: 443 });
  });
});
