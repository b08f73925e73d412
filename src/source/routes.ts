// The node's routes (bundle only): the uplink and the pod CIDR candidates.
import { BUNDLE_FILES } from '../bundle/names.js';
import { parseIpRouteJson, type RouteSnapshot, summarizeRoutes } from '../bundle/parse-ip.js';
import type { SourceDef } from './contract.js';

const FILES = [
  { file: BUNDLE_FILES.ipRoute, family: 4 },
  { file: BUNDLE_FILES.ip6Route, family: 6 },
] as const;

export const routes: SourceDef<RouteSnapshot> = {
  name: 'routes',
  async collect(w) {
    await w.run(BUNDLE_FILES.ipRoute, ['ip', '-j', 'route']);
    await w.run(BUNDLE_FILES.ip6Route, ['ip', '-6', '-j', 'route']);
  },
  fromBundle(bundle) {
    const parsed = FILES.filter((f) => bundle.has(f.file)).map((f) =>
      parseIpRouteJson(bundle.text(f.file), bundle.path(f.file), f.family),
    );
    if (parsed.length === 0) return { state: 'down', reason: bundle.whyMissing(BUNDLE_FILES.ipRoute) };
    const s = summarizeRoutes(parsed.flatMap((p) => p.value));
    return {
      state: 'up',
      value: s,
      warnings: parsed.flatMap((p) => p.warnings),
      ...(s.uplink || s.uplink6 ? {} : { note: 'no default route: the uplink is unknown' }),
    };
  },
};
