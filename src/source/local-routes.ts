// Non-kernel routes of table local that cloud guest agents add for LB IPs, shown only by `ip route show table local`.
import { BUNDLE_FILES } from '../bundle/names.js';
import { parseIpRouteJson } from '../bundle/parse-ip.js';
import { runCommand, withCommand } from '../kernel/nat/command.js';
import type { Family, LocalRoute, LocalRouteSnapshot } from '../kernel/types.js';
import { type ReadResult, readerOf, type SourceDef } from './contract.js';

/** `ip -j` output of table local: one route per local address, ~150 bytes each. */
const MAX_OUTPUT = 16 << 20;
/** Routes kept: guest agents add a handful per NIC; more is something else, and is cut with a warning. */
const MAX_ROUTES = 4096;
const TIMEOUT_MS = 10_000;

const FAMILIES: { family: Family; flag: string[]; file: string }[] = [
  { family: 4, flag: [], file: BUNDLE_FILES.ipRouteLocal },
  { family: 6, flag: ['-6'], file: BUNDLE_FILES.ip6RouteLocal },
];

/** The routes of one `ip -j route show table local` output that no address made. */
export function localRoutesOf(
  text: string,
  file: string,
  family: Family,
): { routes: LocalRoute[]; warnings: string[] } {
  const parsed = parseIpRouteJson(text, file, family);
  const routes: LocalRoute[] = [];
  for (const r of parsed.value) {
    if (r.type !== 'local' || r.protocol === undefined || r.protocol === 'kernel') continue;
    routes.push({ family: r.family, dst: r.dst, ...(r.dev !== undefined ? { dev: r.dev } : {}), protocol: r.protocol });
  }
  return { routes, warnings: parsed.warnings };
}

/** All families' routes, cut to MAX_ROUTES, with the parse warnings and then `extra` ones. */
function snapshotOf(parts: ReturnType<typeof localRoutesOf>[], extra: string[] = []): ReadResult<LocalRouteSnapshot> {
  const all = parts.flatMap((p) => p.routes);
  const warnings = parts.flatMap((p) => p.warnings);
  if (all.length > MAX_ROUTES)
    warnings.push(`${all.length} non-kernel local routes, only the first ${MAX_ROUTES} kept`);
  return { state: 'up', value: { routes: all.slice(0, MAX_ROUTES) }, warnings: [...warnings, ...extra] };
}

/** The command line as collect runs it (and as live parse warnings name it). */
const listing = (f: (typeof FAMILIES)[number]): string[] => ['ip', ...f.flag, '-j', 'route', 'show', 'table', 'local'];

/** One family's listing: its text, or why not (named by its command line unless a permission reason). */
async function list(
  f: (typeof FAMILIES)[number],
  netns: string | undefined,
): Promise<{ text?: string; failed?: string }> {
  const argv = listing(f);
  const opts = { ...(netns ? { netns } : {}), timeoutMs: TIMEOUT_MS, maxBytes: MAX_OUTPUT, reader: 'local-routes' };
  const r = await runCommand('ip', argv.slice(1), opts);
  return r.ok ? { text: r.stdout.toString('utf8') } : { failed: withCommand(argv.join(' '), r.reason) };
}

export const localRoutes: SourceDef<LocalRouteSnapshot> = {
  name: 'local-routes',
  key: 'localRoutes',
  live(opts) {
    let last: string | undefined;
    return readerOf(localRoutes, async () => {
      const outs = await Promise.all(FAMILIES.map((f) => list(f, opts.netns)));
      const failed = outs.flatMap((o) => (o.failed ? [o.failed] : []));
      // IPv4 is always there; an IPv6 listing fails only where IPv6 is off, which leaves IPv4's answer.
      if (outs[0]!.text === undefined) return { state: 'down', reason: failed.join('; ') };
      const digest = outs.map((o) => o.text ?? '').join('\0');
      if (digest === last) return { state: 'unchanged' };
      last = digest;
      const parts = FAMILIES.flatMap((f, i) => {
        const text = outs[i]!.text;
        return text === undefined ? [] : [localRoutesOf(text, listing(f).join(' '), f.family)];
      });
      return snapshotOf(parts, failed);
    });
  },
  async collect(w) {
    for (const f of FAMILIES) await w.run(f.file, listing(f));
  },
  fromBundle(b) {
    const present = FAMILIES.filter((f) => b.has(f.file));
    if (present.length === 0) return { state: 'down', reason: b.whyMissing(BUNDLE_FILES.ipRouteLocal) };
    return snapshotOf(present.map((f) => localRoutesOf(b.text(f.file), b.path(f.file), f.family)));
  },
};
