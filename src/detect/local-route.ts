// How findings name a non-kernel local route (src/source/local-routes.ts): its `ip route` line and who installs it.
import type { LocalRoute } from '../kernel/types.js';

/** The route as `ip route show table local` prints it. */
export function routeLine(route: LocalRoute): string {
  const host = route.dst.endsWith(route.family === 4 ? '/32' : '/128')
    ? route.dst.slice(0, route.dst.lastIndexOf('/'))
    : route.dst;
  return (
    `local ${host}${route.dev ? ` dev ${route.dev}` : ''} proto ` +
    `${route.protocol}${route.family === 4 ? ' scope host' : ''}`
  );
}

/** Who adds such routes, when the protocol tells. */
export function routeOwner(route: LocalRoute): string {
  return route.protocol === '66'
    ? 'the Google guest agent’s route for a forwarded (internal LB) IP (protocol 66, its default ethernet_proto_id)'
    : `a local route of protocol ${route.protocol} that no address made (a cloud or network agent’s)`;
}
