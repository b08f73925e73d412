// Gateway API → Service ports a Gateway's addresses reach, and at which listener ports: via routes attached
// (Accepted=True, or parentRef without status) with a backendRef; cross-namespace only with a ReferenceGrant.
import { canonicalIp, dnsName, FieldError, isObj, optArr, optInt, optObj, optStr, reqStr } from './fields.js';
import { GATEWAY_GROUP, parseOne, parseParts, pushTo, type SourcedObject, type ValueOf } from './objects.js';
import type { GatewayFront, L7Listener } from './types.js';

/** The route kinds the view follows, and the listener protocols each attaches to (Gateway API's defaults). */
const ROUTE_KINDS = {
  HTTPRoute: ['HTTP', 'HTTPS'],
  GRPCRoute: ['HTTP', 'HTTPS'],
  TLSRoute: ['TLS'],
  TCPRoute: ['TCP'],
  UDPRoute: ['UDP'],
} as const satisfies Record<string, readonly string[]>;
type RouteKind = keyof typeof ROUTE_KINDS;

export const parseGatewayClass = (sourced: SourcedObject) =>
  parseOne(sourced, 'GatewayClass', false, (o, ctx) => ({
    name: ctx.name,
    controllerName: optStr(optObj(o.spec, 'spec')?.controllerName, 'spec.controllerName') ?? '',
  }));

export function parseGateway(sourced: SourcedObject) {
  return parseOne(sourced, 'Gateway', true, (raw, ctx) => {
    const spec = optObj(raw.spec, 'spec') ?? {};
    const listeners = parseParts(spec.listeners, 'spec.listeners', ctx.warn, (listener, path) => {
      if (!isObj(listener)) throw new FieldError(`${path} is not an object`);
      const port = optInt(listener.port, `${path}.port`, 1, 65535);
      if (port === undefined) throw new FieldError(`${path}.port is missing`);
      const namespaces = optObj(
        optObj(listener.allowedRoutes, `${path}.allowedRoutes`)?.namespaces,
        `${path}.allowedRoutes.namespaces`,
      );
      return {
        name: optStr(listener.name, `${path}.name`) ?? '',
        port,
        protocol: reqStr(listener.protocol, `${path}.protocol`),
        from: optStr(namespaces?.from, `${path}.allowedRoutes.namespaces.from`) ?? 'Same',
      };
    });
    const ips: string[] = [];
    const hostnames: string[] = [];
    const status = optObj(raw.status, 'status');
    parseParts(status?.addresses, 'status.addresses', ctx.warn, (a, path) => {
      if (!isObj(a)) throw new FieldError(`${path} is not an object`);
      const type = optStr(a.type, `${path}.type`) ?? 'IPAddress';
      if (type === 'IPAddress') ips.push(canonicalIp(a.value, `${path}.value`));
      else if (type === 'Hostname') hostnames.push(dnsName(reqStr(a.value, `${path}.value`)));
      // NamedAddress and implementation-specific types name nothing a packet carries.
    });
    return {
      namespace: ctx.namespace,
      name: ctx.name,
      className: optStr(spec.gatewayClassName, 'spec.gatewayClassName') ?? '',
      listeners,
      ips,
      hostnames,
    };
  });
}

function objectRef(value: unknown, path: string, defaults: { group: string; kind: string; namespace: string }) {
  if (!isObj(value)) throw new FieldError(`${path} is not an object`);
  return {
    group: optStr(value.group, `${path}.group`) ?? defaults.group,
    kind: optStr(value.kind, `${path}.kind`) ?? defaults.kind,
    namespace: optStr(value.namespace, `${path}.namespace`) || defaults.namespace,
    name: reqStr(value.name, `${path}.name`),
    sectionName: optStr(value.sectionName, `${path}.sectionName`) || undefined,
    port: optInt(value.port, `${path}.port`, 1, 65535),
  };
}
type ObjectRef = ReturnType<typeof objectRef>;

const isAccepted = (conditions: unknown, path: string): boolean =>
  optArr(conditions, path).some((c) => isObj(c) && c.type === 'Accepted' && c.status === 'True');

export function routeParser(kind: RouteKind) {
  return (s: SourcedObject) =>
    parseOne(s, kind, true, (raw, ctx) => {
      const spec = optObj(raw.spec, 'spec') ?? {};
      const parentDefaults = { group: GATEWAY_GROUP, kind: 'Gateway', namespace: ctx.namespace };
      const parentRefs = parseParts(spec.parentRefs, 'spec.parentRefs', ctx.warn, (p, path) =>
        objectRef(p, path, parentDefaults),
      );
      const statusParents = optArr(optObj(raw.status, 'status')?.parents, 'status.parents');
      const acceptedParents =
        statusParents.length === 0
          ? undefined
          : parseParts(statusParents, 'status.parents', ctx.warn, (p, path) => {
              if (!isObj(p)) throw new FieldError(`${path} is not an object`);
              return isAccepted(p.conditions, `${path}.conditions`)
                ? objectRef(p.parentRef, `${path}.parentRef`, parentDefaults)
                : undefined;
            }).filter((r): r is ObjectRef => r !== undefined);
      const backends: { namespace: string; name: string; port: number }[] = [];
      optArr(spec.rules, 'spec.rules').forEach((rule, r) => {
        const refs = isObj(rule) ? rule.backendRefs : undefined;
        const parsed = parseParts(refs, `spec.rules[${r}].backendRefs`, ctx.warn, (b, path) => {
          const ref = objectRef(b, path, { group: '', kind: 'Service', namespace: ctx.namespace });
          if (ref.group !== '' || ref.kind !== 'Service') return undefined;
          if (ref.port === undefined) throw new FieldError(`${path}.port is missing (required for a Service)`);
          return { namespace: ref.namespace, name: ref.name, port: ref.port };
        });
        for (const b of parsed) if (b) backends.push(b);
      });
      return { kind, namespace: ctx.namespace, name: ctx.name, parentRefs, acceptedParents, backends };
    });
}

export function parseReferenceGrant(sourced: SourcedObject) {
  return parseOne(sourced, 'ReferenceGrant', true, (raw, ctx) => {
    const spec = optObj(raw.spec, 'spec') ?? {};
    const from = parseParts(spec.from, 'spec.from', ctx.warn, (f, path) => {
      if (!isObj(f)) throw new FieldError(`${path} is not an object`);
      return {
        group: optStr(f.group, `${path}.group`) ?? '',
        kind: reqStr(f.kind, `${path}.kind`),
        namespace: reqStr(f.namespace, `${path}.namespace`),
      };
    });
    const to = parseParts(spec.to, 'spec.to', ctx.warn, (t, path) => {
      if (!isObj(t)) throw new FieldError(`${path} is not an object`);
      return {
        group: optStr(t.group, `${path}.group`) ?? '',
        kind: reqStr(t.kind, `${path}.kind`),
        name: optStr(t.name, `${path}.name`) || undefined,
      };
    });
    return { namespace: ctx.namespace, from, to };
  });
}

type GatewayEntry = ValueOf<typeof parseGateway>;
type RouteEntry = ValueOf<ReturnType<typeof routeParser>>;
type ReferenceGrantEntry = ValueOf<typeof parseReferenceGrant>;

/** A backendRef into another namespace is allowed by a ReferenceGrant there (Gateway API's rule). */
function granted(
  grants: readonly ReferenceGrantEntry[],
  route: RouteEntry,
  backend: { namespace: string; name: string },
): boolean {
  if (backend.namespace === route.namespace) return true;
  return grants.some(
    (g) =>
      g.namespace === backend.namespace &&
      g.from.some((f) => f.group === GATEWAY_GROUP && f.kind === route.kind && f.namespace === route.namespace) &&
      g.to.some((t) => t.group === '' && t.kind === 'Service' && (t.name === undefined || t.name === backend.name)),
  );
}

/** The listeners a parentRef attaches the route to: by section name and port, of the route kind's protocols. */
function attachedListeners(gw: GatewayEntry, ref: ObjectRef, route: RouteEntry, accepted: boolean): L7Listener[] {
  const protocols: readonly string[] = ROUTE_KINDS[route.kind];
  const out: L7Listener[] = [];
  for (const l of gw.listeners) {
    if (ref.sectionName !== undefined && l.name !== ref.sectionName) continue;
    if (ref.port !== undefined && l.port !== ref.port) continue;
    if (!protocols.includes(l.protocol)) continue;
    // Without the controller's word, the listener's own namespace rule decides (a Selector's labels are not read).
    if (!accepted && l.from === 'Same' && route.namespace !== gw.namespace) continue;
    out.push({ protocol: l.protocol === 'UDP' ? 'UDP' : 'TCP', port: l.port });
  }
  return out;
}

const REF_FIELDS = ['group', 'kind', 'namespace', 'name', 'sectionName', 'port'] as const;
const sameRef = (a: ObjectRef, b: ObjectRef): boolean => REF_FIELDS.every((f) => a[f] === b[f]);

/** Gateway routes by "namespace/serviceName": one Gateway front and its addresses per backend Service port. */
export function indexGateways(objects: {
  classes: ValueOf<typeof parseGatewayClass>[];
  gateways: GatewayEntry[];
  routes: RouteEntry[];
  grants: ReferenceGrantEntry[];
}) {
  const index = new Map<string, { front: GatewayFront; ips: string[]; hostnames: string[]; port: number }[]>();
  const classes = new Map(objects.classes.map((c) => [c.name, c.controllerName]));
  const gateways = new Map(objects.gateways.map((g) => [`${g.namespace}/${g.name}`, g]));
  for (const route of objects.routes) {
    // A route the controller has judged attaches where it says; one without status where its refs say.
    const parents = route.acceptedParents ?? route.parentRefs;
    for (const ref of parents) {
      if (ref.group !== GATEWAY_GROUP || ref.kind !== 'Gateway') continue;
      // A status parent counts only for a parentRef the route still has.
      if (route.acceptedParents && !route.parentRefs.some((p) => sameRef(p, ref))) continue;
      const gw = gateways.get(`${ref.namespace}/${ref.name}`);
      if (!gw || (gw.ips.length === 0 && gw.hostnames.length === 0)) continue;
      const listeners = attachedListeners(gw, ref, route, route.acceptedParents !== undefined);
      if (listeners.length === 0) continue;
      const controller = classes.get(gw.className);
      const front: GatewayFront = {
        gateway: `${gw.namespace}/${gw.name}`,
        route: `${route.kind} ${route.namespace}/${route.name}`,
        listeners,
        className: gw.className,
        ...(controller ? { controller } : {}),
      };
      for (const b of route.backends) {
        if (!granted(objects.grants, route, b)) continue;
        pushTo(index, `${b.namespace}/${b.name}`, { front, ips: gw.ips, hostnames: gw.hostnames, port: b.port });
      }
    }
  }
  return index;
}

/** Gateway addresses routing to this Service port, each (Gateway, address) once, plus hostnames to resolve. */
export function gatewayVipsFor(
  index: ReturnType<typeof indexGateways>,
  namespace: string,
  service: string,
  port: number,
) {
  const fronts = new Map<string, { front: GatewayFront; ips: string[]; hostnames: string[] }>();
  for (const r of index.get(`${namespace}/${service}`) ?? []) {
    if (r.port !== port) continue;
    const known = fronts.get(r.front.gateway);
    if (!known) {
      fronts.set(r.front.gateway, {
        front: { ...r.front, listeners: [...r.front.listeners] },
        ips: r.ips,
        hostnames: r.hostnames,
      });
      continue;
    }
    for (const l of r.front.listeners) {
      if (!known.front.listeners.some((k) => k.port === l.port && k.protocol === l.protocol))
        (known.front.listeners as L7Listener[]).push(l);
    }
  }
  const vips: { ingress: string; ip: string; gateway: GatewayFront }[] = [];
  const hostnames: { gateway: GatewayFront; hostname: string }[] = [];
  for (const { front, ips, hostnames: names } of fronts.values()) {
    for (const ip of ips) vips.push({ ingress: front.gateway, ip, gateway: front });
    for (const hostname of names) hostnames.push({ gateway: front, hostname });
  }
  return { vips, hostnames };
}
