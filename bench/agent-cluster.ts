// The synthetic cluster of bench/agent.ts, in the shape
// `kubectl get svc,endpointslices,nodes -A -o json` prints (a v1 List), so
// the agent reads it through --cluster-file like a real saved cluster.
// S LoadBalancer Services (ETP Local/Cluster alternating, every 5th UDP,
// every 3rd with two ports), E endpoints spread round-robin over them (one
// EndpointSlice per Service; every 200th endpoint on this node), and the Node.
// Addresses are chosen so that the benchmark's unrelated conntrack entries
// (10.1xx.x.x -> 10.200.0.1:80, replies from 10.244.x.x:8080) match nothing.
// The objects carry the metadata a real cluster gives them (uid, timestamps,
// labels, owner references, endpoint targetRefs and zones); with `managedFields`
// also what the API server sends and kubectl hides (managedFields, as written
// by kubectl apply, the cloud controller and the EndpointSlice controller).

export const BENCH_NODE = {
  name: 'bench-node',
  ip: '10.20.0.2',
  peerIp: '10.20.0.1',
  podCidr: '10.131.0.0/24',
} as const;

/** One TCP Service port with its VIP: where bench/agent points the entries the agent must keep. */
export interface TcpVipPort {
  vip: string;
  port: number;
}

export interface SyntheticCluster {
  list: { apiVersion: string; kind: string; metadata: object; items: object[] };
  servicePorts: number;
  tcpVipPorts: TcpVipPort[];
}

interface PortSpec {
  name: string;
  port: number;
  targetPort: number;
  protocol: 'TCP' | 'UDP';
}

const quad = (a: number, b: number, n: number): string => `${a}.${b}.${(n >> 8) & 0xff}.${n & 0xff}`;

function portsOf(i: number): PortSpec[] {
  const udp = i % 5 === 4;
  const first: PortSpec = udp
    ? { name: 'dns', port: 53, targetPort: 5353, protocol: 'UDP' }
    : { name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' };
  if (i % 3 !== 0) return [first];
  const second: PortSpec = udp
    ? { name: 'stats', port: 8125, targetPort: 8125, protocol: 'UDP' }
    : { name: 'https', port: 443, targetPort: 8443, protocol: 'TCP' };
  return [first, second];
}

/** Address of endpoint j: this node's pod CIDR for every 200th, other nodes' pods (10.128.0.0/14) otherwise. */
function endpointOf(j: number): { address: string; nodeName: string } {
  if (j % 200 === 0) return { address: `10.131.0.${2 + ((j / 200) % 250)}`, nodeName: BENCH_NODE.name };
  return { address: `10.${128 + (j >> 16)}.${(j >> 8) & 0xff}.${j & 0xff}`, nodeName: `node-${1 + (j % 199)}` };
}

/** A stable made-up uid for object n of a kind. */
const uidOf = (kind: number, n: number): string =>
  `${kind.toString(16).padStart(8, '0')}-0000-4000-8000-${n.toString(16).padStart(12, '0')}`;

const CREATED = '2026-10-01T08:00:00Z';

/** managedFields of a LoadBalancer Service applied with kubectl and given its VIP by the cloud controller. */
function serviceManagedFields(portCount: number, local: boolean): object[] {
  const ports: Record<string, object> = {};
  for (let i = 0; i < portCount; i++)
    ports[`k:{"port":${80 + i},"protocol":"TCP"}`] = {
      '.': {},
      'f:name': {},
      'f:port': {},
      'f:protocol': {},
      'f:targetPort': {},
    };
  return [
    {
      manager: 'kubectl-client-side-apply',
      operation: 'Update',
      apiVersion: 'v1',
      time: CREATED,
      fieldsType: 'FieldsV1',
      fieldsV1: {
        'f:metadata': {
          'f:annotations': {
            '.': {},
            'f:kubectl.kubernetes.io/last-applied-configuration': {},
            'f:service.kubernetes.io/qcloud-loadbalancer-internal-subnetid': {},
          },
        },
        'f:spec': {
          'f:allocateLoadBalancerNodePorts': {},
          'f:externalTrafficPolicy': {},
          'f:internalTrafficPolicy': {},
          'f:ports': { '.': {}, ...ports },
          'f:selector': {},
          'f:sessionAffinity': {},
          'f:type': {},
        },
      },
    },
    {
      manager: 'cloud-controller-manager',
      operation: 'Update',
      apiVersion: 'v1',
      time: CREATED,
      fieldsType: 'FieldsV1',
      subresource: 'status',
      fieldsV1: { 'f:status': { 'f:loadBalancer': { 'f:ingress': {} } } },
    },
    ...(local
      ? [
          {
            manager: 'kube-controller-manager',
            operation: 'Update',
            apiVersion: 'v1',
            time: CREATED,
            fieldsType: 'FieldsV1',
            fieldsV1: { 'f:spec': { 'f:healthCheckNodePort': {} } },
          },
        ]
      : []),
  ];
}

const SLICE_MANAGED_FIELDS = [
  {
    manager: 'kube-controller-manager',
    operation: 'Update',
    apiVersion: 'discovery.k8s.io/v1',
    time: CREATED,
    fieldsType: 'FieldsV1',
    fieldsV1: {
      'f:addressType': {},
      'f:endpoints': {},
      'f:ports': {},
      'f:metadata': {
        'f:annotations': { '.': {}, 'f:endpoints.kubernetes.io/last-change-trigger-time': {} },
        'f:generateName': {},
        'f:labels': { '.': {}, 'f:endpointslice.kubernetes.io/managed-by': {}, 'f:kubernetes.io/service-name': {} },
        'f:ownerReferences': { '.': {}, 'k:{"uid":"..."}': {} },
      },
    },
  },
];

export interface SyntheticOptions {
  /** Add managedFields, as the API server sends objects (kubectl get -o json hides them). */
  managedFields?: boolean;
}

export function syntheticCluster(services: number, endpoints: number, o: SyntheticOptions = {}): SyntheticCluster {
  if (services > 65_000) throw new Error('--services: at most 65000 (one VIP each in 10.210.0.0/16)');
  if (endpoints > 190_000) throw new Error('--endpoints: at most 190000 (pod addresses in 10.128.0.0/14)');
  const items: object[] = [];
  const tcpVipPorts: TcpVipPort[] = [];
  let servicePorts = 0;
  // NodePorts beyond the default 30000-32767 range: 5,000 LB Services need a wider --service-node-port-range.
  let nextNodePort = 30_000;
  const epsOf = new Map<number, number[]>();
  for (let j = 0; j < endpoints; j++) {
    const s = j % services;
    const list = epsOf.get(s);
    if (list) list.push(j);
    else epsOf.set(s, [j]);
  }
  for (let i = 0; i < services; i++) {
    const namespace = `team-${i % 100}`;
    const name = `svc-${i}`;
    const vip = quad(10, 210, i + 1);
    const local = i % 2 === 1;
    const ports = portsOf(i);
    servicePorts += ports.length;
    for (const p of ports) if (p.protocol === 'TCP') tcpVipPorts.push({ vip, port: p.port });
    const specPorts = ports.map((p) => ({
      name: p.name,
      port: p.port,
      protocol: p.protocol,
      targetPort: p.targetPort,
    }));
    const lastApplied = {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name, namespace },
      spec: { type: 'LoadBalancer', ports: specPorts, selector: { app: name } },
    };
    items.push({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: {
        name,
        namespace,
        uid: uidOf(1, i),
        creationTimestamp: CREATED,
        labels: { app: name, team: namespace },
        annotations: {
          'kubectl.kubernetes.io/last-applied-configuration': `${JSON.stringify(lastApplied)}\n`,
          'service.kubernetes.io/qcloud-loadbalancer-internal-subnetid': 'subnet-bench001',
        },
        finalizers: ['service.kubernetes.io/load-balancer-cleanup'],
        ...(o.managedFields ? { managedFields: serviceManagedFields(ports.length, local) } : {}),
      },
      spec: {
        type: 'LoadBalancer',
        allocateLoadBalancerNodePorts: true,
        ipFamilies: ['IPv4'],
        ipFamilyPolicy: 'SingleStack',
        sessionAffinity: 'None',
        clusterIP: quad(10, 96, i + 1),
        clusterIPs: [quad(10, 96, i + 1)],
        externalTrafficPolicy: local ? 'Local' : 'Cluster',
        internalTrafficPolicy: 'Cluster',
        ...(local ? { healthCheckNodePort: nextNodePort++ } : {}),
        ports: specPorts.map((p) => ({ ...p, nodePort: nextNodePort++ })),
        selector: { app: name },
      },
      status: { loadBalancer: { ingress: [{ ip: vip, ipMode: 'VIP' }] } },
    });
    items.push({
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: {
        name: `${name}-bench`,
        generateName: `${name}-`,
        namespace,
        uid: uidOf(2, i),
        creationTimestamp: CREATED,
        generation: 1,
        labels: {
          'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io',
          'kubernetes.io/service-name': name,
        },
        annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': CREATED },
        ownerReferences: [
          { apiVersion: 'v1', kind: 'Service', name, uid: uidOf(1, i), controller: true, blockOwnerDeletion: true },
        ],
        ...(o.managedFields ? { managedFields: SLICE_MANAGED_FIELDS } : {}),
      },
      addressType: 'IPv4',
      endpoints: (epsOf.get(i) ?? []).map((j) => {
        const ep = endpointOf(j);
        return {
          addresses: [ep.address],
          conditions: { ready: true, serving: true, terminating: false },
          nodeName: ep.nodeName,
          zone: `zone-${j % 3}`,
          targetRef: { kind: 'Pod', namespace, name: `${name}-${j}`, uid: uidOf(3, j) },
        };
      }),
      ports: ports.map((p) => ({ name: p.name, port: p.targetPort, protocol: p.protocol })),
    });
  }
  items.push({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: BENCH_NODE.name },
    spec: { podCIDR: BENCH_NODE.podCidr, podCIDRs: [BENCH_NODE.podCidr] },
    status: {
      addresses: [
        { type: 'InternalIP', address: BENCH_NODE.ip },
        { type: 'Hostname', address: BENCH_NODE.name },
      ],
    },
  });
  return {
    list: { apiVersion: 'v1', kind: 'List', metadata: { resourceVersion: '' }, items },
    servicePorts,
    tcpVipPorts,
  };
}
