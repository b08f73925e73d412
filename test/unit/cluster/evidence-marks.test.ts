// The cluster view's marks that evidence ownership reads (issue 36, finding 1): which LB hostnames
// the user chose by annotation, and which Service ports have endpoints no controller derived.
import { describe, expect, it } from 'vitest';
import { buildClusterView } from '../../../src/cluster/build.js';
import { classifyDocuments } from '../../../src/cluster/file.js';

function view(items: object[]) {
  const { objects } = classifyDocuments([{ apiVersion: 'v1', kind: 'List', items }]);
  return buildClusterView(objects);
}

const lbService = (name: string, annotations: Record<string, string>, hostname: string) => ({
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { namespace: 'a', name, annotations },
  spec: { type: 'LoadBalancer', clusterIP: '10.96.0.9', ports: [{ name: 'p', port: 443, protocol: 'TCP' }] },
  status: { loadBalancer: { ingress: [{ hostname }] } },
});

const slice = (svc: string, labels: Record<string, string>, address: string) => ({
  apiVersion: 'discovery.k8s.io/v1',
  kind: 'EndpointSlice',
  metadata: { namespace: 'a', name: `${svc}-${address}`, labels: { 'kubernetes.io/service-name': svc, ...labels } },
  addressType: 'IPv4',
  endpoints: [{ addresses: [address] }],
  ports: [{ name: 'p', port: 8443, protocol: 'TCP' }],
});

describe('cluster view: evidence ownership marks', () => {
  it("a status hostname that one of the Service's annotations names is chosen by the user, whatever the key", () => {
    const v = view([
      lbService('do', { 'service.beta.kubernetes.io/do-loadbalancer-hostname': 'LB.Example.com.' }, 'lb.example.com'),
      lbService('hetzner', { 'load-balancer.hetzner.cloud/hostname': 'h.example.com' }, 'h.example.com'),
      lbService(
        'aws',
        { 'service.beta.kubernetes.io/aws-load-balancer-type': 'nlb' },
        'k8s-a-aws-0123.elb.eu-west-1.amazonaws.com',
      ),
    ]);
    expect(Object.fromEntries(v.services.map((s) => [s.name, s.chosenLbHostnames]))).toEqual({
      do: ['lb.example.com'],
      hetzner: ['h.example.com'],
      aws: undefined,
    });
  });

  it('endpoints from a slice the endpointslice controller did not write mark the Service port', () => {
    const managed = { 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' };
    const mirrored = { 'endpointslice.kubernetes.io/managed-by': 'endpointslicemirroring-controller.k8s.io' };
    const v = view([
      lbService('sel', {}, 'x.example.com'),
      slice('sel', managed, '10.244.0.1'),
      lbService('mirror', {}, 'y.example.com'),
      slice('mirror', mirrored, '10.244.0.2'),
      lbService('mixed', {}, 'z.example.com'),
      slice('mixed', managed, '10.244.0.3'),
      slice('mixed', {}, '10.244.0.4'),
    ]);
    expect(Object.fromEntries(v.services.map((s) => [s.name, [s.endpoints.length, s.unmanagedEndpoints]]))).toEqual({
      sel: [1, undefined],
      mirror: [1, true],
      mixed: [2, true],
    });
  });
});
