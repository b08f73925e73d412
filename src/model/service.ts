// Service concepts every layer names: the traffic policies and the identity of a Service port.

/** spec.externalTrafficPolicy / internalTrafficPolicy, as Kubernetes spells them. */
export type TrafficPolicy = 'Cluster' | 'Local';

/** A Service port's identity across views, flat (join): a template literal's text is a tree of concatenations. */
export function portKey(service: { namespace: string; name: string }, proto: string, port: number): string {
  return `${service.namespace}/${service.name}|${proto}|${port}`;
}

/** A Service port as its metric series label it. */
export function servicePortLabels(s: { namespace: string; name: string }, protocol: string, port: number) {
  return { namespace: s.namespace, service: s.name, port: String(port), protocol };
}

export type ServicePortLabels = ReturnType<typeof servicePortLabels>;
