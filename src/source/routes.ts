// The node's routes (bundle only): the uplink and the pod CIDR candidates.
import { BUNDLE_FILES } from '../bundle/names.js';
import { parseIpRouteJson, type RouteInfo, type RouteSnapshot, summarizeRoutes } from '../bundle/parse-ip.js';
import type { SourceDef } from './contract.js';

export const routes: SourceDef<RouteSnapshot> = {
  name: 'routes',
  async collect(w) {
    await w.run(BUNDLE_FILES.ipRoute, ['ip', '-j', 'route']);
    await w.run(BUNDLE_FILES.ip6Route, ['ip', '-6', '-j', 'route']);
  },
  fromBundle(bundle) {
    const files = (
      [
        [BUNDLE_FILES.ipRoute, 4],
        [BUNDLE_FILES.ip6Route, 6],
      ] as const
    ).filter(([f]) => bundle.has(f));
    if (files.length === 0) return { state: 'down', reason: bundle.whyMissing(BUNDLE_FILES.ipRoute) };
    const all: RouteInfo[] = [];
    const warnings: string[] = [];
    for (const [f, fam] of files) {
      const r = parseIpRouteJson(bundle.text(f), bundle.path(f), fam);
      all.push(...r.value);
      warnings.push(...r.warnings);
    }
    const s = summarizeRoutes(all);
    return {
      state: 'up',
      value: s,
      warnings,
      ...(s.uplink || s.uplink6 ? {} : { note: 'no default route: the uplink is unknown' }),
    };
  },
};
