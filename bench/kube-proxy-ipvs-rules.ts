// kube-proxy's IPVS-mode iptables rules and ipsets for a synthetic cluster
// (bench/agent-cluster.ts), as iptables-restore and `ipset restore` input, in the
// layout of test/fixtures/nat/ipvs-1.28.v4.save and ipvs-1.28.ipset.save (captured
// from kube-proxy 1.28): a fixed nat table whose rules match sets, and the sets
// holding one member per Service port (KUBE-LOAD-BALANCER: one per LB VIP:port),
// per NodePort and per endpoint (KUBE-LOOP-BACK). The IPVS virtual servers and the
// kube-ipvs0 addresses are not made: this kernel has neither ip_vs nor dummy links.

interface Svc {
  metadata: { name: string; namespace: string };
  spec: {
    clusterIP: string;
    externalTrafficPolicy: string;
    ports: { port: number; protocol: string; nodePort: number; targetPort: number }[];
  };
  status: { loadBalancer: { ingress: { ip: string }[] } };
}

interface Slice {
  metadata: { namespace: string; labels: Record<string, string> };
  endpoints: { addresses: string[] }[];
}

export interface KubeProxyIpvsRules {
  /** iptables-restore input (nat and filter tables). */
  iptables: string;
  /** `ipset restore` input. */
  ipset: string;
  /** Members of KUBE-LOAD-BALANCER (LB VIP:port). */
  loadBalancerEntries: number;
  /** Members of every set. */
  members: number;
}

const HASH = 'family inet hashsize 1024 maxelem 65536';

export function kubeProxyIpvsRules(items: object[], podCidr = '10.128.0.0/14'): KubeProxyIpvsRules {
  const services = items.filter((o) => (o as { kind: string }).kind === 'Service') as unknown as Svc[];
  const slices = new Map<string, Slice>();
  for (const o of items) {
    if ((o as { kind: string }).kind !== 'EndpointSlice') continue;
    const s = o as unknown as Slice;
    slices.set(`${s.metadata.namespace}/${s.metadata.labels['kubernetes.io/service-name']}`, s);
  }
  const sets: Record<string, { type: string; members: string[] }> = {
    'KUBE-CLUSTER-IP': { type: `hash:ip,port ${HASH}`, members: [] },
    'KUBE-LOAD-BALANCER': { type: `hash:ip,port ${HASH}`, members: [] },
    'KUBE-LOAD-BALANCER-LOCAL': { type: `hash:ip,port ${HASH}`, members: [] },
    'KUBE-LOAD-BALANCER-FW': { type: `hash:ip,port ${HASH}`, members: [] },
    'KUBE-LOAD-BALANCER-SOURCE-CIDR': { type: `hash:ip,port,net ${HASH}`, members: [] },
    'KUBE-LOOP-BACK': { type: `hash:ip,port,ip ${HASH}`, members: [] },
    'KUBE-IPVS-IPS': { type: `hash:ip ${HASH}`, members: [] },
    'KUBE-NODE-PORT-TCP': { type: 'bitmap:port range 0-65535', members: [] },
    'KUBE-NODE-PORT-UDP': { type: 'bitmap:port range 0-65535', members: [] },
    'KUBE-NODE-PORT-LOCAL-TCP': { type: 'bitmap:port range 0-65535', members: [] },
    'KUBE-NODE-PORT-LOCAL-UDP': { type: 'bitmap:port range 0-65535', members: [] },
  };
  const ipvsIps = new Set<string>();
  for (const s of services) {
    const eps = (slices.get(`${s.metadata.namespace}/${s.metadata.name}`)?.endpoints ?? []).map((e) => e.addresses[0]!);
    const local = s.spec.externalTrafficPolicy === 'Local';
    const lb = s.status.loadBalancer.ingress[0]?.ip;
    ipvsIps.add(s.spec.clusterIP);
    if (lb) ipvsIps.add(lb);
    for (const p of s.spec.ports) {
      const proto = p.protocol.toLowerCase();
      const up = proto.toUpperCase();
      sets['KUBE-CLUSTER-IP']!.members.push(`${s.spec.clusterIP},${proto}:${p.port}`);
      if (lb) {
        sets['KUBE-LOAD-BALANCER']!.members.push(`${lb},${proto}:${p.port}`);
        if (local) sets['KUBE-LOAD-BALANCER-LOCAL']!.members.push(`${lb},${proto}:${p.port}`);
      }
      sets[`KUBE-NODE-PORT-${up}`]!.members.push(String(p.nodePort));
      if (local) sets[`KUBE-NODE-PORT-LOCAL-${up}`]!.members.push(String(p.nodePort));
      for (const ip of eps) sets['KUBE-LOOP-BACK']!.members.push(`${ip},${proto}:${p.targetPort},${ip}`);
    }
  }
  sets['KUBE-IPVS-IPS']!.members.push(...ipvsIps);
  const lines: string[] = [];
  let members = 0;
  for (const [name, set] of Object.entries(sets)) {
    lines.push(`create ${name} ${set.type}`);
    // A member repeated (two ports of one Service share a loop-back entry only if equal) is added once.
    for (const m of new Set(set.members)) {
      lines.push(`add ${name} ${m}`);
      members++;
    }
  }
  const nat = [
    '*nat',
    ':PREROUTING ACCEPT [0:0]',
    ':INPUT ACCEPT [0:0]',
    ':OUTPUT ACCEPT [0:0]',
    ':POSTROUTING ACCEPT [0:0]',
    ':KUBE-KUBELET-CANARY - [0:0]',
    ':KUBE-LOAD-BALANCER - [0:0]',
    ':KUBE-MARK-MASQ - [0:0]',
    ':KUBE-NODE-PORT - [0:0]',
    ':KUBE-POSTROUTING - [0:0]',
    ':KUBE-PROXY-CANARY - [0:0]',
    ':KUBE-SERVICES - [0:0]',
    '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
    '-A KUBE-LOAD-BALANCER -m comment --comment "Kubernetes service load balancer ip + port with externalTrafficPolicy=local" -m set --match-set KUBE-LOAD-BALANCER-LOCAL dst,dst -j RETURN',
    '-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ',
    '-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000',
    '-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port with externalTrafficPolicy=local" -m set --match-set KUBE-NODE-PORT-LOCAL-TCP dst -j RETURN',
    '-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ',
    '-A KUBE-NODE-PORT -p udp -m comment --comment "Kubernetes nodeport UDP port with externalTrafficPolicy=local" -m set --match-set KUBE-NODE-PORT-LOCAL-UDP dst -j RETURN',
    '-A KUBE-NODE-PORT -p udp -m comment --comment "Kubernetes nodeport UDP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-UDP dst -j KUBE-MARK-MASQ',
    '-A KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE',
    '-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN',
    '-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0',
    '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
    '-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN',
    '-A KUBE-SERVICES -m comment --comment "Kubernetes service lb portal" -m set --match-set KUBE-LOAD-BALANCER dst,dst -j KUBE-LOAD-BALANCER',
    `-A KUBE-SERVICES ! -s ${podCidr} -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ`,
    '-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT',
    '-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT',
    '-A KUBE-SERVICES -m set --match-set KUBE-LOAD-BALANCER dst,dst -j ACCEPT',
    'COMMIT',
  ];
  const filter = [
    '*filter',
    ':INPUT ACCEPT [0:0]',
    ':FORWARD ACCEPT [0:0]',
    ':OUTPUT ACCEPT [0:0]',
    ':KUBE-FORWARD - [0:0]',
    ':KUBE-NODE-PORT - [0:0]',
    '-A INPUT -j KUBE-NODE-PORT',
    '-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT',
    '-A KUBE-NODE-PORT -m comment --comment "Kubernetes health check node port" -j ACCEPT',
    'COMMIT',
  ];
  return {
    iptables: [...nat, ...filter, ''].join('\n'),
    ipset: `${lines.join('\n')}\n`,
    loadBalancerEntries: new Set(sets['KUBE-LOAD-BALANCER']!.members).size,
    members,
  };
}
