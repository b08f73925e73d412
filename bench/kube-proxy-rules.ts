// kube-proxy's iptables rules for a synthetic cluster (bench/agent-cluster.ts),
// as iptables-restore input in the format kube-proxy 1.20 writes
// (pkg/proxy/iptables/proxier.go, as in test/fixtures/nat/iptables-1.21-legacy.v4.save):
// per Service port a cluster-IP pair in KUBE-SERVICES, a "loadbalancer IP" rule to
// KUBE-FW-X, KUBE-SVC-X balancing over one KUBE-SEP-Y per endpoint (mark + DNAT),
// NodePort rules, and for externalTrafficPolicy=Local a KUBE-XLB-X chain; plus the
// filter table's KUBE-* chains; kubelet's KUBE-MARK-DROP rule, as on a whole node. Chain names are
// hashes of the port's name, as kube-proxy's. test/lab/kube-proxy-rules.test.ts compares the nat
// table with the real kube-proxy v1.20.2's for the same Services.
import { kubeProxyHash } from '../test/support/kube-proxy-hash.js';

interface Svc {
  metadata: { name: string; namespace: string };
  spec: {
    clusterIP: string;
    externalTrafficPolicy: string;
    healthCheckNodePort?: number;
    ports: { name: string; port: number; protocol: string; nodePort: number; targetPort: number }[];
  };
  status: { loadBalancer: { ingress: { ip: string }[] } };
}

interface Slice {
  metadata: { namespace: string; labels: Record<string, string> };
  endpoints: { addresses: string[] }[];
}

/** kube-proxy's iptables chain suffix: 16 base32 characters of a SHA-256. */
const chainHash = (text: string): string => kubeProxyHash(text, 16);

export interface KubeProxyRules {
  text: string;
  rules: number;
}

export function kubeProxyRules(items: object[], podCidr = '10.128.0.0/14'): KubeProxyRules {
  const services = items.filter((o) => (o as { kind: string }).kind === 'Service') as unknown as Svc[];
  const slices = new Map<string, Slice>();
  for (const o of items) {
    if ((o as { kind: string }).kind !== 'EndpointSlice') continue;
    const s = o as unknown as Slice;
    slices.set(`${s.metadata.namespace}/${s.metadata.labels['kubernetes.io/service-name']}`, s);
  }
  const chains: string[] = [];
  const nat: string[] = [];
  const svcRules: string[] = [];
  const nodePorts: string[] = [];
  const filter: string[] = [];
  const rule = (list: string[], chain: string, spec: string) => list.push(`-A ${chain} ${spec}`);
  rule(nat, 'PREROUTING', '-m comment --comment "kubernetes service portals" -j KUBE-SERVICES');
  rule(nat, 'OUTPUT', '-m comment --comment "kubernetes service portals" -j KUBE-SERVICES');
  rule(nat, 'POSTROUTING', '-m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING');
  rule(nat, 'KUBE-MARK-DROP', '-j MARK --set-xmark 0x8000/0x8000');
  rule(nat, 'KUBE-MARK-MASQ', '-j MARK --set-xmark 0x4000/0x4000');
  rule(nat, 'KUBE-POSTROUTING', '-m mark ! --mark 0x4000/0x4000 -j RETURN');
  rule(nat, 'KUBE-POSTROUTING', '-j MARK --set-xmark 0x4000/0x0');
  rule(
    nat,
    'KUBE-POSTROUTING',
    '-m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
  );
  for (const s of services) {
    const key = `${s.metadata.namespace}/${s.metadata.name}`;
    const eps = (slices.get(key)?.endpoints ?? []).map((e) => e.addresses[0]!);
    const local = s.spec.externalTrafficPolicy === 'Local';
    const lb = s.status.loadBalancer.ingress[0]?.ip;
    for (const p of s.spec.ports) {
      const name = `${key}:${p.name}`;
      const proto = p.protocol.toLowerCase();
      const id = chainHash(`${name}${proto}`);
      const svc = `KUBE-SVC-${id}`;
      const fw = `KUBE-FW-${id}`;
      const xlb = `KUBE-XLB-${id}`;
      const c = `-m comment --comment "${name}"`;
      chains.push(svc);
      rule(
        svcRules,
        'KUBE-SERVICES',
        `! -s ${podCidr} -d ${s.spec.clusterIP}/32 -p ${proto} -m comment --comment "${name} cluster IP" -m ${proto} --dport ${p.port} -j KUBE-MARK-MASQ`,
      );
      rule(
        svcRules,
        'KUBE-SERVICES',
        `-d ${s.spec.clusterIP}/32 -p ${proto} -m comment --comment "${name} cluster IP" -m ${proto} --dport ${p.port} -j ${svc}`,
      );
      if (lb) {
        chains.push(fw);
        rule(
          svcRules,
          'KUBE-SERVICES',
          `-d ${lb}/32 -p ${proto} -m comment --comment "${name} loadbalancer IP" -m ${proto} --dport ${p.port} -j ${fw}`,
        );
        const lbc = `-m comment --comment "${name} loadbalancer IP"`;
        if (local) rule(nat, fw, `${lbc} -j ${xlb}`);
        else {
          rule(nat, fw, `${lbc} -j KUBE-MARK-MASQ`);
          rule(nat, fw, `${lbc} -j ${svc}`);
        }
        rule(nat, fw, `${lbc} -j KUBE-MARK-DROP`);
      }
      if (local) {
        chains.push(xlb);
        rule(
          nodePorts,
          'KUBE-NODEPORTS',
          `-s 127.0.0.0/8 -p ${proto} ${c} -m ${proto} --dport ${p.nodePort} -j KUBE-MARK-MASQ`,
        );
        rule(nodePorts, 'KUBE-NODEPORTS', `-p ${proto} ${c} -m ${proto} --dport ${p.nodePort} -j ${xlb}`);
        rule(
          nat,
          xlb,
          `-s ${podCidr} -m comment --comment "Redirect pods trying to reach external loadbalancer VIP to clusterIP" -j ${svc}`,
        );
        rule(
          nat,
          xlb,
          `-m comment --comment "masquerade LOCAL traffic for ${name} LB IP" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ`,
        );
        rule(
          nat,
          xlb,
          `-m comment --comment "route LOCAL traffic for ${name} LB IP to service chain" -m addrtype --src-type LOCAL -j ${svc}`,
        );
        rule(nat, xlb, `-m comment --comment "${name} has no local endpoints" -j KUBE-MARK-DROP`);
        if (s.spec.healthCheckNodePort) {
          rule(
            filter,
            'KUBE-NODEPORTS',
            `-p tcp -m comment --comment "${name} health check node port" -m tcp --dport ${s.spec.healthCheckNodePort} -j ACCEPT`,
          );
        }
      } else {
        rule(nodePorts, 'KUBE-NODEPORTS', `-p ${proto} ${c} -m ${proto} --dport ${p.nodePort} -j KUBE-MARK-MASQ`);
        rule(nodePorts, 'KUBE-NODEPORTS', `-p ${proto} ${c} -m ${proto} --dport ${p.nodePort} -j ${svc}`);
      }
      eps.forEach((ip, i) => {
        const sep = `KUBE-SEP-${chainHash(`${name}${proto}${ip}:${p.targetPort}`)}`;
        chains.push(sep);
        const left = eps.length - i;
        rule(
          nat,
          svc,
          left > 1
            ? `${c} -m statistic --mode random --probability ${(1 / left).toFixed(11)} -j ${sep}`
            : `${c} -j ${sep}`,
        );
        rule(nat, sep, `-s ${ip}/32 ${c} -j KUBE-MARK-MASQ`);
        rule(nat, sep, `-p ${proto} ${c} -m ${proto} -j DNAT --to-destination ${ip}:${p.targetPort}`);
      });
      if (eps.length === 0)
        rule(
          filter,
          'KUBE-SERVICES',
          `-d ${s.spec.clusterIP}/32 -p ${proto} -m comment --comment "${name} has no endpoints" -m ${proto} --dport ${p.port} -j REJECT --reject-with icmp-port-unreachable`,
        );
    }
  }
  rule(
    svcRules,
    'KUBE-SERVICES',
    '-m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS',
  );
  const natRules = [...nat, ...nodePorts, ...svcRules];
  const builtinNat = ['PREROUTING', 'INPUT', 'OUTPUT', 'POSTROUTING'].map((c) => `:${c} ACCEPT [0:0]`);
  const userNat = [
    'KUBE-MARK-DROP',
    'KUBE-MARK-MASQ',
    'KUBE-NODEPORTS',
    'KUBE-POSTROUTING',
    'KUBE-PROXY-CANARY',
    'KUBE-SERVICES',
    ...new Set(chains),
  ].map((c) => `:${c} - [0:0]`);
  const filterHead = [
    ':INPUT ACCEPT [0:0]',
    ':FORWARD ACCEPT [0:0]',
    ':OUTPUT ACCEPT [0:0]',
    ':KUBE-EXTERNAL-SERVICES - [0:0]',
    ':KUBE-FORWARD - [0:0]',
    ':KUBE-NODEPORTS - [0:0]',
    ':KUBE-SERVICES - [0:0]',
  ];
  const filterRules = [
    '-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS',
    '-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
    '-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
    '-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP',
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT',
    ...filter,
  ];
  const text = [
    '*nat',
    ...builtinNat,
    ...userNat,
    ...natRules,
    'COMMIT',
    '*filter',
    ...filterHead,
    ...filterRules,
    'COMMIT',
    '',
  ].join('\n');
  return { text, rules: natRules.length + filterRules.length };
}
