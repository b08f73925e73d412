// Non-kernel routes of table local, which cloud guest agents add for LB IPs (detect/guest-local-route.ts);
// read via `ip -j route show table local`, as no other source shows them.
import { execFile } from 'node:child_process';
import { BUNDLE_FILES } from '../bundle/names.js';
import { parseIpRouteJson } from '../bundle/parse-ip.js';
import type { Family, LocalRoute, LocalRouteSnapshot } from '../kernel/types.js';
import { permissionDenied } from '../model/permission.js';
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

type IpResult = { ok: true; stdout: string } | { ok: false; reason: string };

function runIp(args: string[], netns: string | undefined): Promise<IpResult> {
  const argv = ['-j', ...args];
  const [file, full] = !netns
    ? ['ip', argv]
    : netns.includes('/')
      ? ['nsenter', [`--net=${netns}`, '--', 'ip', ...argv]]
      : ['ip', ['-n', netns, ...argv]];
  return new Promise((resolve) => {
    execFile(
      file,
      full,
      { timeout: TIMEOUT_MS, killSignal: 'SIGKILL', maxBuffer: MAX_OUTPUT, env: { ...process.env, LC_ALL: 'C' } },
      (err, stdout, stderr) => {
        if (!err) return resolve({ ok: true, stdout });
        const msg = String(stderr).trim().split('\n')[0] ?? '';
        if (err.code === 'ENOENT')
          return resolve({ ok: false, reason: `${file} not found in PATH (install iproute2)` });
        if (err.killed || err.signal === 'SIGKILL')
          return resolve({ ok: false, reason: `ip ${argv.join(' ')}: timed out after ${TIMEOUT_MS} ms` });
        if (/maxBuffer/i.test(err.message))
          return resolve({ ok: false, reason: `ip ${argv.join(' ')}: output larger than ${MAX_OUTPUT} bytes` });
        if (/Operation not permitted|Permission denied/i.test(msg))
          return resolve({ ok: false, reason: permissionDenied('root or CAP_SYS_ADMIN for another namespace', msg) });
        resolve({ ok: false, reason: `ip ${argv.join(' ')}: ${msg || `exited with ${err.code ?? err.signal}`}` });
      },
    );
  });
}

export const localRoutes: SourceDef<LocalRouteSnapshot> = {
  name: 'local-routes',
  key: 'localRoutes',
  live(opts) {
    let last: string | undefined;
    return readerOf(localRoutes, async () => {
      const outs = await Promise.all(
        FAMILIES.map((f) => runIp([...f.flag, 'route', 'show', 'table', 'local'], opts.netns)),
      );
      const failed = outs.flatMap((o) => (o.ok ? [] : [o.reason]));
      // IPv4 is always there; an IPv6 listing fails only where IPv6 is off, which leaves IPv4's answer.
      if (!outs[0]!.ok) return { state: 'down', reason: failed.join('; ') };
      const digest = outs.map((o) => (o.ok ? o.stdout : '')).join('\0');
      if (digest === last) return { state: 'unchanged' };
      last = digest;
      const parts = FAMILIES.flatMap((f, i) => {
        const o = outs[i]!;
        return o.ok ? [localRoutesOf(o.stdout, listing(f).join(' '), f.family)] : [];
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
