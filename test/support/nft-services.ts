// The Services of the nftables lab and its captured fixtures: one per case the
// diagnosis tells apart on an nftables node.
import type { NftEndpoint, NftService } from './kube-nft.js';
import { NFT_LAB as L } from './nft-lab.js';

const ep = (ip: string, local: boolean, port: number = L.epPort): NftEndpoint => ({ ip, port, local });

function svc(name: string, n: number, etp: 'Local' | 'Cluster', endpoints: NftEndpoint[], vip = true): NftService {
  return {
    namespace: 'shop',
    name,
    portName: 'http',
    protocol: 'tcp',
    clusterIP: `10.96.0.${n}`,
    port: 80,
    nodePort: 30000 + n,
    // ipMode Proxy: kube-proxy leaves the LB IP out of its maps.
    lbIPs: vip ? [`203.0.113.${n}`] : [],
    etp,
    endpoints,
  };
}

/** LB IP 203.0.113.N for Service N; the ipMode Proxy one is not in kube-proxy's maps. */
export const LAB_SERVICES: NftService[] = [
  svc('web', 10, 'Cluster', [ep(L.remoteEp, false)]),
  svc('api', 11, 'Local', [ep(L.localEp, true)]),
  svc('far', 12, 'Local', [ep(L.remoteEp, false)]),
  svc('none', 13, 'Cluster', []),
  svc('proxy', 14, 'Cluster', [ep(L.remoteEp, false)], false),
  { ...svc('ranged', 15, 'Cluster', [ep(L.remoteEp, false)]), sourceRanges: ['198.51.100.0/24'] },
];

export const LAB_SERVICES_V6: NftService[] = [
  {
    ...svc('web', 10, 'Cluster', [ep('fd00:10:244:2::5', false)]),
    clusterIP: 'fd00:10:96::10',
    lbIPs: ['2001:db8:113::10'],
  },
  {
    ...svc('far', 12, 'Local', [ep('fd00:10:244:2::5', false)]),
    clusterIP: 'fd00:10:96::12',
    lbIPs: ['2001:db8:113::12'],
  },
];

export const NODE_NAME = 'node-a';

/**
 * The lab's Services, EndpointSlices and this Node as `kubectl get svc,endpointslices,nodes -A -o json`
 * prints them. Remote endpoints are filed under node-b. The `proxy` Service's LB IP has ipMode Proxy
 * (which is why kube-proxy's maps leave it out).
 */
export function labClusterList(services: NftService[] = LAB_SERVICES): object {
  const items: object[] = [];
  for (const s of services) {
    const n = Number(s.clusterIP.split('.')[3]);
    const lbIp = `203.0.113.${n}`;
    const ipMode = s.lbIPs.length > 0 ? 'VIP' : 'Proxy';
    items.push({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: s.name, namespace: s.namespace },
      spec: {
        type: 'LoadBalancer',
        clusterIP: s.clusterIP,
        clusterIPs: [s.clusterIP],
        externalTrafficPolicy: s.etp,
        internalTrafficPolicy: 'Cluster',
        ...(s.sourceRanges ? { loadBalancerSourceRanges: s.sourceRanges } : {}),
        ports: [
          {
            name: s.portName,
            port: s.port,
            protocol: s.protocol.toUpperCase(),
            targetPort: L.epPort,
            nodePort: s.nodePort,
          },
        ],
        selector: { app: s.name },
      },
      status: { loadBalancer: { ingress: [{ ip: lbIp, ipMode }] } },
    });
    items.push({
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: `${s.name}-abcde`, namespace: s.namespace, labels: { 'kubernetes.io/service-name': s.name } },
      addressType: 'IPv4',
      endpoints: s.endpoints.map((e, i) => ({
        addresses: [e.ip],
        conditions: { ready: true, serving: true, terminating: false },
        nodeName: e.local ? NODE_NAME : 'node-b',
        targetRef: { kind: 'Pod', namespace: s.namespace, name: `${s.name}-${i}` },
      })),
      ports: [{ name: s.portName, port: L.epPort, protocol: s.protocol.toUpperCase() }],
    });
  }
  items.push({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: NODE_NAME },
    spec: { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24'] },
    status: {
      addresses: [
        { type: 'InternalIP', address: L.node },
        { type: 'Hostname', address: NODE_NAME },
      ],
    },
  });
  return { apiVersion: 'v1', kind: 'List', metadata: { resourceVersion: '' }, items };
}
