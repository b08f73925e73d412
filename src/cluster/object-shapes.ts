// What the view reads of each kind, as json-reduce.ts shapes: a field a parser starts to read must be added here
// (test/unit/cluster/object-shapes.test.ts checks it).
import { each, fields, idValue, mapOf, type Shape, type UnitShape, unit, VALUE } from './json-reduce.js';

/** A Status in place of the object: what an ERROR event of a watch carries. */
const STATUS = { code: VALUE, message: VALUE, reason: VALUE };

/** An object of a kind read, whose fields may instead be a Status's. */
const kindObject = (f: Record<string, Shape>): Shape => fields({ ...f, ...STATUS });

const metadata = (extra: Record<string, Shape> = {}): Shape =>
  fields({
    name: idValue('name'),
    namespace: idValue('namespace'),
    uid: VALUE,
    resourceVersion: idValue('resourceVersion'),
    ...extra,
  });

const lbIngress = (entry: Record<string, Shape>): Shape =>
  fields({ loadBalancer: fields({ ingress: each(fields(entry)) }) });

/** All annotations are kept, so a Service with one over the value cap is skipped whole rather than misread. */
const service = kindObject({
  metadata: metadata({ annotations: mapOf(VALUE) }),
  spec: fields({
    type: VALUE,
    clusterIP: VALUE,
    clusterIPs: each(VALUE),
    ports: each(fields({ name: VALUE, protocol: VALUE, port: VALUE, targetPort: VALUE, nodePort: VALUE })),
    externalIPs: each(VALUE),
    externalTrafficPolicy: VALUE,
    internalTrafficPolicy: VALUE,
    healthCheckNodePort: VALUE,
    loadBalancerClass: VALUE,
  }),
  status: lbIngress({ ip: VALUE, hostname: VALUE, ipMode: VALUE }),
});

/** Labels whole (a few short ones; which of them the parser reads is its own business). */
const endpointSlice = kindObject({
  metadata: metadata({ labels: mapOf(VALUE) }),
  addressType: VALUE,
  ports: each(fields({ name: VALUE, protocol: VALUE, port: VALUE })),
  endpoints: each(
    fields({
      addresses: each(VALUE),
      conditions: fields({ ready: VALUE, serving: VALUE, terminating: VALUE }),
      nodeName: VALUE,
      topology: mapOf(VALUE),
    }),
  ),
});

const backend: Shape = fields({ service: fields({ name: VALUE, port: fields({ number: VALUE, name: VALUE }) }) });

const ingress = kindObject({
  metadata: metadata(),
  spec: fields({
    defaultBackend: backend,
    rules: each(fields({ http: fields({ paths: each(fields({ backend })) }) })),
  }),
  status: lbIngress({ ip: VALUE }),
});

const node = kindObject({
  metadata: metadata(),
  spec: fields({ podCIDR: VALUE, podCIDRs: each(VALUE) }),
  status: fields({ addresses: each(fields({ type: VALUE, address: VALUE })) }),
});

// Gateway API: names and refs only; listeners, addresses, rules' backendRefs and status parents.
const objectRef = fields({ group: VALUE, kind: VALUE, namespace: VALUE, name: VALUE, sectionName: VALUE, port: VALUE });

const gatewayClass = kindObject({ metadata: metadata(), spec: fields({ controllerName: VALUE }) });

const gateway = kindObject({
  metadata: metadata(),
  spec: fields({
    gatewayClassName: VALUE,
    listeners: each(
      fields({
        name: VALUE,
        port: VALUE,
        protocol: VALUE,
        allowedRoutes: fields({ namespaces: fields({ from: VALUE }) }),
      }),
    ),
  }),
  status: fields({ addresses: each(fields({ type: VALUE, value: VALUE })) }),
});

const route = kindObject({
  metadata: metadata(),
  spec: fields({ parentRefs: each(objectRef), rules: each(fields({ backendRefs: each(objectRef) })) }),
  status: fields({
    parents: each(fields({ parentRef: objectRef, conditions: each(fields({ type: VALUE, status: VALUE })) })),
  }),
});

const referenceGrant = kindObject({
  metadata: metadata(),
  spec: fields({
    from: each(fields({ group: VALUE, kind: VALUE, namespace: VALUE })),
    to: each(fields({ group: VALUE, kind: VALUE, name: VALUE })),
  }),
});

/** Each kind as a list/watch unit with the most the view keeps of one; past it the object is skipped. */
export const OBJECT_SHAPES = {
  services: unit('Service', 64 << 10, service),
  endpointSlices: unit('EndpointSlice', 1 << 20, endpointSlice),
  ingresses: unit('Ingress', 256 << 10, ingress),
  nodes: unit('Node', 64 << 10, node),
  gatewayClasses: unit('GatewayClass', 16 << 10, gatewayClass),
  gateways: unit('Gateway', 64 << 10, gateway),
  httpRoutes: unit('HTTPRoute', 256 << 10, route),
  grpcRoutes: unit('GRPCRoute', 256 << 10, route),
  tlsRoutes: unit('TLSRoute', 256 << 10, route),
  tcpRoutes: unit('TCPRoute', 256 << 10, route),
  udpRoutes: unit('UDPRoute', 256 << 10, route),
  referenceGrants: unit('ReferenceGrant', 64 << 10, referenceGrant),
} satisfies Record<string, UnitShape>;

/** A list page: its resourceVersion and continue token, and its items. */
export const listShape = (item: Shape): Shape =>
  fields({ metadata: fields({ resourceVersion: VALUE, continue: VALUE }), items: each(item), ...STATUS });

/** One watch event: its type, and its object (or Status). */
export const eventShape = (object: Shape): Shape => fields({ type: VALUE, object });
