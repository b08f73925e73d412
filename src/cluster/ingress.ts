// Ingresses (networking.k8s.io/v1) → Service ports an L7 LB VIP reaches via default backend or rule paths.
import { canonicalIp, FieldError, isObj, type Obj, optArr, optInt, optObj, optStr, reqStr } from './fields.js';
import { parseOne, parseParts, pushTo, type SourcedObject, type ValueOf } from './objects.js';

/** An Ingress as the view uses it: its VIPs and the Service backends they reach. */
export function parseIngress(sourced: SourcedObject) {
  return parseOne(sourced, 'Ingress', true, (raw, ctx) => {
    const spec = optObj(raw.spec, 'spec') ?? {};
    const candidates: [unknown, string][] = [];
    if (spec.defaultBackend !== undefined && spec.defaultBackend !== null)
      candidates.push([spec.defaultBackend, 'spec.defaultBackend']);
    optArr(spec.rules, 'spec.rules').forEach((rule, r) => {
      const http = isObj(rule) ? optObj(rule.http, `spec.rules[${r}].http`) : undefined;
      for (const [i, p] of optArr(http?.paths, `spec.rules[${r}].http.paths`).entries())
        candidates.push([isObj(p) ? p.backend : p, `spec.rules[${r}].http.paths[${i}].backend`]);
    });
    const backends: { service: string; port: number | string }[] = [];
    for (const [value, path] of candidates) {
      try {
        const backend = serviceBackend(value, path);
        if (backend) backends.push(backend);
      } catch (e) {
        if (!(e instanceof FieldError)) throw e;
        ctx.warn(e.message);
      }
    }
    const lbIngress = optObj(optObj(raw.status, 'status')?.loadBalancer, 'status.loadBalancer')?.ingress;
    const ips = parseParts(lbIngress, 'status.loadBalancer.ingress', ctx.warn, (e, path) => {
      if (!isObj(e)) throw new FieldError(`${path} is not an object`);
      return e.ip === undefined || e.ip === null ? undefined : canonicalIp(e.ip, `${path}.ip`);
    }).filter((ip): ip is string => ip !== undefined);
    return { namespace: ctx.namespace, ingress: `${ctx.namespace}/${ctx.name}`, ips, backends };
  });
}

/** Ingress routes by "namespace/serviceName" (an Ingress only reaches Services in its own namespace). */
export function indexIngresses(entries: readonly ValueOf<typeof parseIngress>[]) {
  const index = new Map<string, { ingress: string; ips: string[]; port: number | string }[]>();
  for (const p of entries) {
    if (p.ips.length === 0) continue;
    for (const b of p.backends)
      pushTo(index, `${p.namespace}/${b.service}`, { ingress: p.ingress, ips: p.ips, port: b.port });
  }
  return index;
}

/** A service backend's Service and port; undefined for a resource backend. */
function serviceBackend(value: unknown, path: string) {
  if (!isObj(value)) throw new FieldError(`${path} is not an object`);
  const svc = optObj(value.service, `${path}.service`);
  if (!svc) return undefined;
  const port: Obj = optObj(svc.port, `${path}.service.port`) ?? {};
  const number = optInt(port.number, `${path}.service.port.number`, 1, 65535);
  const name = optStr(port.name, `${path}.service.port.name`);
  const p = number ?? name;
  if (p === undefined || p === '') throw new FieldError(`${path}.service.port has neither number nor name`);
  return { service: reqStr(svc.name, `${path}.service.name`), port: p };
}

/** Ingress VIPs that route to this Service port, once per (ingress, ip). */
export function ingressVipsFor(
  index: ReturnType<typeof indexIngresses>,
  namespace: string,
  service: string,
  port: number,
  portName: string,
): { ingress: string; ip: string }[] {
  const out: { ingress: string; ip: string }[] = [];
  const seen = new Set<string>();
  for (const r of index.get(`${namespace}/${service}`) ?? []) {
    if (r.port !== port && (portName === '' || r.port !== portName)) continue;
    for (const ip of r.ips) {
      const key = `${r.ingress}|${ip}`;
      if (!seen.has(key)) out.push({ ingress: r.ingress, ip });
      seen.add(key);
    }
  }
  return out;
}
