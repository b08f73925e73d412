// Every node input in status order, for agent, `snapshot`, `collect` and the bundle reader: a new source is one entry.
import { addresses } from './addresses.js';
import { conntrack } from './conntrack.js';
import type { LiveOptions, SourceDef, SourceReader } from './contract.js';
import { dns } from './dns.js';
import { ipvs } from './ipvs.js';
import { localRoutes } from './local-routes.js';
import { nat } from './nat.js';
import { nft } from './nft.js';
import { routes } from './routes.js';
import { sysctl } from './sysctl.js';

export const SOURCES: readonly SourceDef<unknown>[] = [
  addresses,
  routes,
  localRoutes,
  ipvs,
  conntrack,
  nat,
  nft,
  sysctl,
  dns,
];

export function liveReaders(
  opts: LiveOptions,
  filter: (d: SourceDef<unknown>) => boolean = () => true,
): { def: SourceDef<unknown>; reader: SourceReader }[] {
  // A source that follows the cluster view (dns) needs it: without one it is not read at all.
  return SOURCES.filter((d) => d.live && (!d.followsCluster || opts.lbHostnames !== undefined) && filter(d)).map(
    (def) => ({ def, reader: def.live!(opts) }),
  );
}
