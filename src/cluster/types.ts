// What the cluster says about Services, as the detectors consume it (from the API or `kubectl get -o json`).
import type { HostnameLookup } from '../model/hostname-lookup.js';
import type { ServiceProtocol } from '../model/protocol.js';
import type { TrafficPolicy } from '../model/service.js';

export type { HostnameLookup, TrafficPolicy };

/** One IP in status.loadBalancer.ingress (or an Ingress' status), with KEP-1860's ipMode. */
export interface LbIngressIp {
  ip: string;
  /** 'VIP' (default: kube-proxy binds/handles it) or 'Proxy' (traffic must go to the LB). */
  ipMode: 'VIP' | 'Proxy';
  hostname?: string;
  /** Hostname this address was resolved from; kube-proxy does not know it, so pod traffic to it always hits the LB. */
  resolvedFrom?: string;
}

/** A port an L7 LB listens on: an Ingress' 80/443 TCP, or a Gateway listener's. */
export interface L7Listener {
  protocol: 'TCP' | 'UDP';
  port: number;
}

/** The Gateway (gateway.networking.k8s.io) behind an L7 VIP, and how a route reaches the Service through it. */
export interface GatewayFront {
  /** "namespace/name" of the Gateway. */
  gateway: string;
  /** The first route seen to reach the Service port, "HTTPRoute namespace/name". */
  route: string;
  /** The listeners its routes attach to. */
  listeners: readonly L7Listener[];
  className: string;
  /** The GatewayClass's spec.controllerName, when the class is known. */
  controller?: string;
}

/** An L7 LB address that routes to a Service port: an Ingress' VIP, or a Gateway's address (`gateway` set). */
export interface L7Vip {
  /** "namespace/name" of the Ingress or Gateway. */
  ingress: string;
  ip: string;
  gateway?: GatewayFront;
  /** The Gateway hostname this address was resolved from by this node's resolver. */
  resolvedFrom?: string;
}

/** One slice endpoint shared by every Service port the slice serves; its port is in ServiceView.endpointPorts. */
export interface EndpointView {
  address: string;
  nodeName?: string;
  ready: boolean;
  /** True when nodeName equals this node's name. */
  local: boolean;
  /** Serving while it terminates: what kube-proxy falls back to where no endpoint is ready (see usableLocally). */
  servingTerminating?: true;
  // No targetRef: nothing reads it.
}

/** Slice port of a port's endpoints: one value when slices agree, else per endpoint; read with slicePort(). */
export type EndpointPorts = number | undefined | ReadonlyMap<EndpointView, number | undefined>;

/** The annotations that matter for loopback, already interpreted (src/cluster/annotations.ts has the exact keys). */
export interface LoopbackAnnotations {
  /** Tencent `service.cloud.tencent.com/prevent-loopback: "true"`. */
  tencentPreventLoopback?: boolean;
  /** Alibaba `service.beta.kubernetes.io/alibaba-cloud-loadbalancer-hostname` value. */
  alibabaHostname?: string;
  /** The annotation that makes the LB internal (Alibaba intranet, Tencent subnet id, AWS/Azure/GCP internal). */
  internalByAnnotation?: { key: string; value: string };
  /** Reuse of an existing LB (Tencent `service.kubernetes.io/tke-existed-lbid`, Alibaba `...loadbalancer-id`). */
  existingLb?: { key: string; value: string };
  /** Every annotation whose key matched one of the above families, verbatim, for evidence. */
  raw: Record<string, string>;
}

/** One Service port as the detectors see it (a Service with 3 ports gives 3 ServiceViews). */
export interface ServiceView {
  namespace: string;
  name: string;
  /** ServicePort.name ('' when unnamed). */
  portName: string;
  protocol: ServiceProtocol;
  port: number;
  targetPort?: number | string;
  type: 'ClusterIP' | 'NodePort' | 'LoadBalancer' | 'ExternalName';
  clusterIPs: string[];
  nodePort?: number;
  /** spec.healthCheckNodePort (ETP=Local LoadBalancer Services). */
  healthCheckNodePort?: number;
  lbIngress: LbIngressIp[];
  /** status.loadBalancer.ingress entries that carry only a hostname (e.g. AWS NLB); absent when none. */
  lbHostnames?: string[];
  /** The lbHostnames a Service's own annotation chose, so what they resolve to says nothing about ownership. */
  chosenLbHostnames?: string[];
  /** This node's lookups of lbHostnames, when they were looked up (their addresses are in lbIngress). */
  lbHostnameLookups?: HostnameLookup[];
  /** VIPs of Ingresses whose backends reference this Service port, and of Gateways whose routes do. */
  ingressVips: L7Vip[];
  /** Hostnames of Gateways routing to this Service port (lb-hostnames.ts resolves them into ingressVips). */
  gatewayHostnames?: { gateway: GatewayFront; hostname: string }[];
  externalIPs: string[];
  externalTrafficPolicy: TrafficPolicy;
  internalTrafficPolicy: TrafficPolicy;
  loadBalancerClass?: string;
  /** Each endpoint once (the slice's own list when one slice serves the port, shared with its other ports). */
  endpoints: EndpointView[];
  /** Their target ports, from the EndpointSlices (see EndpointPorts). */
  endpointPorts?: EndpointPorts;
  /** Some endpoints come from a slice the endpointslice controller did not write, so they may name anyone's pods. */
  unmanagedEndpoints?: boolean;
  annotations: LoopbackAnnotations;
  /** True when the LB is internal (by annotation, or every LB IP is a private address). */
  internalLb: boolean;
}

export interface NodeView {
  name: string;
  addresses: { type: string; address: string }[];
  podCIDRs: string[];
}

export interface ClusterView {
  /** When the view was last confirmed complete (list or watch event), ISO time. */
  syncedAt?: string;
  /** False when the API is unreachable and this is the last good view. */
  fresh: boolean;
  staleReason?: string;
  /** The name this view was built for (the agent's --node-name): endpoints filed under it are `local`. */
  nodeName?: string;
  /** This node's Node object, when one of that name exists. */
  node?: NodeView;
  services: ServiceView[];
  /** Problems reading the input (a bad object is skipped), e.g. 'items[3]: Service without metadata.name'. */
  warnings: string[];
}
