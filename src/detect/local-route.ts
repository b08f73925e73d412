// How findings name a non-kernel local route (src/source/local-routes.ts): the line `ip route`
// prints for it, and who installs such routes.
import type { LocalRoute } from '../kernel/types.js';

/** The route as `ip route show table local` prints it. */
export function routeLine(r: LocalRoute): string {
  const host = r.dst.endsWith(r.family === 4 ? '/32' : '/128') ? r.dst.slice(0, r.dst.lastIndexOf('/')) : r.dst;
  return `local ${host}${r.dev ? ` dev ${r.dev}` : ''} proto ${r.protocol}${r.family === 4 ? ' scope host' : ''}`;
}

/** Who adds such routes, when the protocol tells. */
export function routeOwner(r: LocalRoute): string {
  return r.protocol === '66'
    ? 'the Google guest agent’s route for a forwarded (internal LB) IP (protocol 66, its default ethernet_proto_id)'
    : `a local route of protocol ${r.protocol} that no address made (a cloud or network agent’s)`;
}
