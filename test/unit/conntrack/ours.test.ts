// What is ours (model/ours.ts) over the lab's cluster: ServiceIndex.match, which looks the Services
// up in the LB-Service index, keeps exactly the entries the ours rule keeps over ServiceIndex.ours(),
// by the same rule; and the counters' targets derive from the same description.
import { describe, expect, it } from 'vitest';
import { ServiceIndex } from '../../../src/agent/service-index.js';
import { packetTargets } from '../../../src/capture/targets.js';
import { buildClusterView } from '../../../src/cluster/build.js';
import { classifyDocuments } from '../../../src/cluster/file.js';
import { clusterList, LAB } from '../../../src/demo/lab.js';
import type { ConntrackEntry } from '../../../src/kernel/types.js';
import { tupleRuleOf } from '../../../src/model/ours.js';

function index(): ServiceIndex {
  const { objects } = classifyDocuments([clusterList('Local')]);
  const view = buildClusterView(objects, { nodeName: LAB.node1Name });
  return new ServiceIndex(view, { nodeIps: [LAB.node1], ipvsIps: [], podCidrs: [LAB.podCidr] });
}

/** An entry from 10.99.0.1 to dst:dport, answered by src:sport. */
function entry(protoNum: number, dst: string, dport: number, src = dst, sport = dport): ConntrackEntry {
  return {
    family: 4,
    proto: protoNum === 6 ? 'tcp' : 'udp',
    orig: { src: '10.99.0.1', sport: 40000, dst, dport, protoNum },
    reply: { src, sport, dst: '10.99.0.1', dport: 40000, protoNum },
    status: 0,
    statusFlags: [],
    timeoutS: 100,
    mark: 0,
    zone: 0,
    id: 1,
  };
}

describe('ours', () => {
  const idx = index();
  const ours = idx.ours();
  const rule = tupleRuleOf(ours);

  it('describes the lab node: its VIP, NodePort and health-check NodePort, endpoint, addresses', () => {
    expect(ours.vips).toContainEqual({ address: LAB.vip, protoNum: 6, port: LAB.port });
    expect(ours.nodePorts).toEqual([
      { protoNum: 6, port: LAB.nodePort, healthCheck: false },
      { protoNum: 6, port: 32001, healthCheck: true },
    ]);
    expect(ours.endpoints).toContainEqual({ address: LAB.serverPod, protoNum: 6, port: LAB.serverPort });
    expect(ours.nodeIps).toEqual([LAB.node1]);
    expect(ours.podCidrs).toEqual([LAB.podCidr]);
  });

  it('ServiceIndex.match keeps exactly what the rule over ours() keeps, by the same rule', () => {
    const entries: ConntrackEntry[] = [];
    for (const protoNum of [6, 17]) {
      for (const v of ours.vips)
        entries.push(entry(protoNum, v.address, v.port), entry(protoNum, v.address, v.port + 1));
      for (const n of ours.nodePorts)
        for (const ip of [...ours.nodeIps, '10.99.9.9']) entries.push(entry(protoNum, ip, n.port));
      for (const e of ours.endpoints)
        entries.push(
          entry(protoNum, '10.99.8.8', 80, e.address, e.port),
          entry(protoNum, '10.99.8.8', 80, e.address, 1),
        );
    }
    const kept = entries.filter((e) => rule(e) !== undefined);
    // Not vacuous: each rule keeps some, and some are not kept.
    expect(new Set(kept.map(rule))).toEqual(new Set(['vip', 'nodePort', 'endpoint']));
    expect(kept.length).toBeLessThan(entries.length);
    for (const e of entries) {
      const m = idx.match(e);
      const r = rule(e);
      expect({ kept: m !== undefined, toVip: m?.toVip }, `${e.orig.protoNum} ${e.orig.dst}:${e.orig.dport}`).toEqual({
        kept: r !== undefined,
        toVip: r === undefined ? undefined : r === 'vip',
      });
    }
  });

  it('a health-check NodePort keeps no entry, but its probes are counted', () => {
    expect(rule(entry(6, LAB.node1, 32001))).toBeUndefined();
    expect(idx.match(entry(6, LAB.node1, 32001))).toBeUndefined();
    expect(packetTargets(ours).nodePorts).toContainEqual({ port: 32001, proto: 'tcp' });
  });

  it('the counters target each VIP:port and NodePort once, with the node addresses bound', () => {
    const t = packetTargets({
      ...ours,
      vips: [...ours.vips, ...ours.vips],
      nodePorts: [...ours.nodePorts, ...ours.nodePorts],
    });
    expect(t).toEqual(idx.targets());
    expect(t.localPrefixes).toEqual([
      { cidr: LAB.podCidr, bound: false },
      { cidr: LAB.node1, bound: true },
    ]);
  });
});
