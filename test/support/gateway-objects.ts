// Gateway API objects (gateway.networking.k8s.io) as a controller and a user leave them, for the
// unit fixtures, the real API server's CRDs (test/fixtures/gateway-api/crds.yaml) and the labs.
type Obj = Record<string, unknown>;

const GROUP = 'gateway.networking.k8s.io';

export function gatewayClass(name: string, controllerName: string): Obj {
  return { apiVersion: `${GROUP}/v1`, kind: 'GatewayClass', metadata: { name }, spec: { controllerName } };
}

export interface GatewayOptions {
  namespace: string;
  name: string;
  className: string;
  listeners: { name: string; port: number; protocol: string; from?: string }[];
  /** status.addresses, as the controller writes them once the LB exists. */
  addresses?: { type?: string; value: string }[];
}

export function gateway(o: GatewayOptions): Obj {
  return {
    apiVersion: `${GROUP}/v1`,
    kind: 'Gateway',
    metadata: { name: o.name, namespace: o.namespace },
    spec: {
      gatewayClassName: o.className,
      listeners: o.listeners.map((l) => ({
        name: l.name,
        port: l.port,
        protocol: l.protocol,
        ...(l.from ? { allowedRoutes: { namespaces: { from: l.from } } } : {}),
      })),
    },
    ...(o.addresses ? { status: { addresses: o.addresses } } : {}),
  };
}

export interface RouteOptions {
  kind?: 'HTTPRoute' | 'GRPCRoute' | 'TLSRoute' | 'TCPRoute' | 'UDPRoute';
  namespace: string;
  name: string;
  parents: { name: string; namespace?: string; sectionName?: string; port?: number }[];
  backends: { name: string; port?: number; namespace?: string; kind?: string }[];
  /** status.parents: each parentRef with Accepted True or False; absent: no status. */
  accepted?: boolean[];
}

export function route(o: RouteOptions): Obj {
  const kind = o.kind ?? 'HTTPRoute';
  const version = kind === 'HTTPRoute' || kind === 'GRPCRoute' ? 'v1' : 'v1alpha2';
  const parentRefs = o.parents.map((p) => ({ group: GROUP, kind: 'Gateway', ...p }));
  return {
    apiVersion: `${GROUP}/${version}`,
    kind,
    metadata: { name: o.name, namespace: o.namespace },
    spec: { parentRefs, rules: [{ backendRefs: o.backends.map((b) => ({ ...b })) }] },
    ...(o.accepted
      ? {
          status: {
            parents: parentRefs.map((parentRef, i) => ({
              parentRef,
              controllerName: 'example.com/gateway',
              conditions: [
                {
                  type: 'Accepted',
                  status: o.accepted![i] ? 'True' : 'False',
                  reason: o.accepted![i] ? 'Accepted' : 'NotAllowedByListeners',
                },
              ],
            })),
          },
        }
      : {}),
  };
}

/** A ReferenceGrant in `namespace` letting `fromKind` objects of `fromNamespace` reference its Services (or the one named). */
export function referenceGrant(
  namespace: string,
  name: string,
  fromKind: string,
  fromNamespace: string,
  serviceName?: string,
): Obj {
  return {
    apiVersion: `${GROUP}/v1beta1`,
    kind: 'ReferenceGrant',
    metadata: { name, namespace },
    spec: {
      from: [{ group: GROUP, kind: fromKind, namespace: fromNamespace }],
      to: [{ group: '', kind: 'Service', ...(serviceName ? { name: serviceName } : {}) }],
    },
  };
}
