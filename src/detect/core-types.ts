// What detectors consume and report, apart from types.ts whose list-derived types import the detectors.
// A finding is one mechanism of docs/domain.md for one Service port on this node, with its evidence and fix.
import type { ClusterView } from '../cluster/types.js';
import type { ConntrackEntry } from '../kernel/types.js';
import type { KubeNatFacts, LoadBalancerFact } from '../kubeproxy/facts.js';
import type { ProxyMode } from '../model/kube-proxy.js';
import type { NodeSnapshot } from '../source/node-snapshot.js';

/** active: conntrack shows it happening now; risk: the configuration allows it; info: context or fully mitigated. */
export type Severity = 'active' | 'risk' | 'info';

/** A finding of mechanism M (types.ts: Finding, any mechanism of the list). */
export interface FindingOf<M extends string> {
  service: { namespace: string; name: string };
  port: { port: number; protocol: string; name: string };
  mechanism: M;
  severity: Severity;
  summary: string;
  /** Exact addresses, rule lines, IPVS entries, conntrack entries (conntrack -L style). */
  evidence: string[];
  /** The concrete fix from docs/domain.md that applies, and the mitigations already in place. */
  remedy: string;
  /** For a loop seen in conntrack: the path of its first example, leg by leg (reports draw it). */
  path?: LoopPath;
  /** The remedy's changes to Kubernetes objects (fixes.ts), for active and risk findings; clbprobe applies none. */
  fixes?: FixChange[];
}

/** The object changes a remedy names (fixes.ts makes them). */
export type FixKind =
  | 'etp-cluster'
  | 'tencent-prevent-loopback'
  | 'aws-preserve-client-ip-off'
  | 'source-ranges-add-pods';

/** A JSON merge patch (RFC 7386) or a JSON patch (RFC 6902), as `kubectl patch --type` names them. */
export type FixPatch =
  | { type: 'merge'; body: Record<string, unknown> }
  | { type: 'json'; body: { op: 'add'; path: string; value: unknown }[] };

/** One change to a Kubernetes object, as data; its command is made where it is printed (fixes.ts fixCommand). */
export interface FixChange {
  kind: FixKind;
  object: { apiVersion: 'v1'; kind: 'Service'; namespace: string; name: string };
  patch: FixPatch;
  /** What the change does to the Service's clients (what they lose, what it costs). */
  effect: string;
}

/** A change as the outputs show it: with the command that makes it. */
export interface FixCommand extends FixChange {
  /** `kubectl -n NS patch service NAME --type T -p 'PATCH'`, shell-quoted. */
  command: string;
}

/** One looping connection: the client's leg to the LB, the leg the LB sent back, and the reply that skipped the LB. */
export interface LoopPath {
  /** client → LB VIP → this node's target (NodePort, or a pod for LBs that target pods) → server, as ip:port. */
  hops: { role: string; address: string }[];
  /** Each leg with the conntrack entry it is (conntrack -L form). */
  legs: { label: string; from: string; to: string; conntrack: string }[];
  /** The reply's path: from the server straight to the client, not through the LB. */
  reply: { from: string; to: string; note: string };
}

/** The node's own addresses, split by role (docs/domain.md "local address"). */
export interface LocalAddresses {
  /** Addresses of the node's interfaces other than kube-ipvs0 and loopback, plus the Node object's addresses. */
  nodeIps: string[];
  /** Addresses bound on kube-ipvs0 (IPVS mode: VIPs kube-proxy answers for locally). */
  ipvsIps: string[];
  podCidrs: string[];
}

/** What kube-proxy's NAT rules do to pod traffic to one LB VIP:port (from kubeproxy/facts.ts kubeNatFacts). */
export interface LbNatFact
  extends Pick<LoadBalancerFact, 'port' | 'podTraffic' | 'noEndpoints' | 'sourceRangeDrop' | 'evidence'> {
  ip: string;
  protocol: 'TCP' | 'UDP' | 'SCTP';
  /** kube-proxy's rules DNAT VIP:port on this node (KUBE-SERVICES/KUBE-EXT, service-ips, or an IPVS ipset entry). */
  interceptedLocally: boolean;
}

/** The proxy mode a node shows: one of kube-proxy's, or unknown (no IPVS state and no kube-proxy rules read). */
export type NodeProxyMode = ProxyMode | 'unknown';

export interface NatFacts {
  proxyMode: NodeProxyMode;
  /** Why that mode (e.g. "chain KUBE-SVC-ABC present"). */
  evidence: string[];
  lb: LbNatFact[];
  nftLayouts?: KubeNatFacts['nftLayouts'];
  unreadable?: KubeNatFacts['unreadable'];
}

export interface DiagnoseInput {
  node: NodeSnapshot;
  cluster: ClusterView;
  local: LocalAddresses;
  /** kube-proxy's NAT behaviour per LB VIP; undefined when the NAT tables could not be read. */
  nat?: NatFacts;
  /** Conntrack entries to correlate; may be a generator (the correlator keeps only the relevant ones). */
  conntrack?: Iterable<ConntrackEntry>;
  /** Problems reading the inputs (file + line), shown with the findings. */
  warnings: string[];
}
