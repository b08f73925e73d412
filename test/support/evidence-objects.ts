// Kubernetes objects, cluster views and conntrack entries for the evidence-ownership tests (issue 36,
// finding 1): a victim and a tenant on one node, built with the real builders.
import { buildClusterView } from '../../src/cluster/build.js';
import { classifyDocuments } from '../../src/cluster/file.js';
import { withLbHostnames } from '../../src/cluster/lb-hostnames.js';
import type { ClusterView, HostnameLookup } from '../../src/cluster/types.js';
import type { ConntrackEntry } from '../../src/kernel/types.js';

export const NODE = 'node1';
export const NODE_IP = '10.0.0.11';
export const POD_CIDR = '10.244.1.0/24';
/** A victim pod on this node that opens every connection below unless said otherwise. */
export const VICTIM_CLIENT = '10.244.1.20';
export const MANAGED = { 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' };
export const MIRRORED = { 'endpointslice.kubernetes.io/managed-by': 'endpointslicemirroring-controller.k8s.io' };

export type Obj = Record<string, unknown>;

export function service(
  ns: string,
  name: string,
  o: {
    type?: string;
    clusterIP: string;
    port: number;
    nodePort?: number;
    annotations?: Record<string, string>;
    status?: Obj[];
    selector?: boolean;
  },
): Obj {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { namespace: ns, name, ...(o.annotations ? { annotations: o.annotations } : {}) },
    spec: {
      type: o.type ?? 'ClusterIP',
      clusterIP: o.clusterIP,
      clusterIPs: [o.clusterIP],
      ports: [
        {
          name: 'p',
          port: o.port,
          protocol: 'TCP',
          targetPort: o.port,
          ...(o.nodePort ? { nodePort: o.nodePort } : {}),
        },
      ],
      ...(o.selector === false ? {} : { selector: { app: name } }),
    },
    status: { loadBalancer: o.status ? { ingress: o.status } : {} },
  };
}

export function slice(ns: string, svc: string, labels: Record<string, string>, addresses: string[], port: number): Obj {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { namespace: ns, name: `${svc}-x1`, labels: { 'kubernetes.io/service-name': svc, ...labels } },
    addressType: 'IPv4',
    endpoints: addresses.map((a) => ({ addresses: [a], conditions: { ready: true }, nodeName: NODE })),
    ports: [{ name: 'p', port, protocol: 'TCP' }],
  };
}

export function ingress(ns: string, name: string, svc: string, port: number, vip: string): Obj {
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'Ingress',
    metadata: { namespace: ns, name },
    spec: { defaultBackend: { service: { name: svc, port: { number: port } } } },
    status: { loadBalancer: { ingress: [{ ip: vip }] } },
  };
}

export const node: Obj = {
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name: NODE },
  spec: { podCIDR: POD_CIDR, podCIDRs: [POD_CIDR] },
  status: { addresses: [{ type: 'InternalIP', address: NODE_IP }] },
};

/** The agent's view: built from the objects, with this node's DNS answers for LB hostnames applied. */
export function viewOf(objects: Obj[], answers: Record<string, string[]> = {}): ClusterView {
  const { objects: sorted } = classifyDocuments([{ apiVersion: 'v1', kind: 'List', items: [...objects, node] }]);
  const view = buildClusterView(sorted, { nodeName: NODE });
  if (view.warnings.length) throw new Error(`the test's objects gave warnings: ${view.warnings.join('; ')}`);
  const lookups = new Map<string, HostnameLookup>();
  for (const [hostname, addresses] of Object.entries(answers))
    lookups.set(hostname, { hostname, addresses, resolver: 'test' });
  return withLbHostnames(view, lookups);
}

export interface Flow {
  id: number;
  src?: string;
  dst: string;
  dport: number;
  /** Who answered (after DNAT); the destination itself when unset. */
  replySrc?: string;
  replySport?: number;
}

export function entry(f: Flow): ConntrackEntry {
  const src = f.src ?? VICTIM_CLIENT;
  const sport = 40_000 + f.id;
  return {
    family: 4,
    proto: 'tcp',
    orig: { src, sport, dst: f.dst, dport: f.dport, protoNum: 6 },
    reply: { src: f.replySrc ?? f.dst, sport: f.replySport ?? f.dport, dst: src, dport: sport, protoNum: 6 },
    tcpState: 'ESTABLISHED',
    status: 0x8 | 0x2,
    statusFlags: [],
    timeoutS: 100,
    mark: 0,
    zone: 0,
    id: f.id,
  };
}
