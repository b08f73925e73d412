// ServiceIndex lookups when keys are shared: two Services selecting the same pod port,
// and one alone. Most keys hold one Service port (stored without a list); a shared key must
// still give every Service port it belongs to.
import { describe, expect, it } from 'vitest';
import { ServiceIndex } from '../../../src/agent/service-index.js';
import { buildClusterView } from '../../../src/cluster/build.js';
import { emptyObjects } from '../../../src/cluster/objects.js';
import type { ConntrackEntry } from '../../../src/kernel/types.js';

function service(name: string, vip: string, nodePort: number): object {
  return {
    metadata: { name, namespace: 'shop' },
    spec: {
      type: 'LoadBalancer',
      clusterIP: '172.16.0.1',
      ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort }],
    },
    status: { loadBalancer: { ingress: [{ ip: vip }] } },
  };
}

function slice(service: string, addresses: string[]): object {
  return {
    metadata: { name: `${service}-a`, namespace: 'shop', labels: { 'kubernetes.io/service-name': service } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: addresses.map((a) => ({ addresses: [a], nodeName: 'n1' })),
  };
}

function reply(src: string, sport: number, dst = '10.0.0.9', dport = 80): ConntrackEntry {
  return {
    family: 4,
    proto: 'tcp',
    status: 0,
    statusFlags: [],
    timeoutS: 1,
    mark: 0,
    zone: 0,
    id: 1,
    orig: { src: '10.244.1.5', sport: 40000, dst, dport, protoNum: 6 },
    reply: { src, sport, dst: '10.244.1.5', dport: 40000, protoNum: 6 },
  };
}

describe('ServiceIndex with shared and single keys', () => {
  const objects = emptyObjects();
  objects.services.push(
    { origin: 't', object: service('a', '10.0.0.10', 30001) },
    { origin: 't', object: service('b', '10.0.0.11', 30002) },
  );
  // 10.244.2.7:8080 serves both Services; 10.244.2.8 only a.
  objects.endpointSlices.push(
    { origin: 't', object: slice('a', ['10.244.2.7', '10.244.2.8']) },
    { origin: 't', object: slice('b', ['10.244.2.7']) },
  );
  const view = buildClusterView(objects, { nodeName: 'n1' });
  const idx = new ServiceIndex(view, { nodeIps: ['10.0.1.1'], ipvsIps: [], podCidrs: ['10.244.1.0/24'] });
  const names = (svcs: { name: string }[] | undefined) => svcs?.map((s) => s.name).sort();

  it('an endpoint shared by two Services matches both; one of a single Service matches it alone', () => {
    expect(names(idx.match(reply('10.244.2.7', 8080))?.svcs)).toEqual(['a', 'b']);
    expect(names(idx.match(reply('10.244.2.8', 8080))?.svcs)).toEqual(['a']);
    expect(idx.match(reply('10.244.2.9', 8080))).toBeUndefined();
    expect(
      names(idx.ofSample({ kind: 'loop_return', proto: 'tcp', target: '10.244.2.7', port: 8080 } as never)),
    ).toEqual(['a', 'b']);
  });

  it('VIPs and NodePorts map to their own Service', () => {
    const vip = idx.match(reply('10.244.2.8', 8080, '10.0.0.11', 80));
    expect(vip).toMatchObject({ toVip: true });
    expect(names(vip?.svcs)).toEqual(['b']);
    expect(names(idx.match(reply('10.244.2.8', 8080, '10.0.1.1', 30001))?.svcs)).toEqual(['a']);
  });
});
