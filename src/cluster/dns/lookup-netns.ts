// Hostname lookups from another network namespace through a short-lived child, so queries never leave from this one
// (`ip netns exec` binds /etc/netns/NAME/resolv.conf; `nsenter --net` for other paths).
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { isIP } from 'node:net';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { errText } from '../../errors.js';
import { isObj } from '../fields.js';
import { failedRound, LOOKUP_DEFAULTS, type LookupOptions, type LookupRound, lookupHostnames } from './lookup.js';

const MAX_OUTPUT = 4 * 1024 * 1024;

/** The compiled child next to this file (dist/); from sources (tests under tsx) the .ts through tsx. */
function childCommand(): string[] {
  const here = fileURLToPath(import.meta.url);
  const js = join(dirname(here), 'lookup-child.js');
  if (here.endsWith('.js') && existsSync(js)) return [process.execPath, js];
  return [process.execPath, '--import', 'tsx', join(dirname(here), 'lookup-child.ts')];
}

function netnsCommand(netns: string, argv: string[]): string[] {
  const dir = dirname(netns);
  if (dir === '/var/run/netns' || dir === '/run/netns') return ['ip', 'netns', 'exec', basename(netns), ...argv];
  return ['nsenter', `--net=${netns}`, '--', ...argv];
}

/** Looks up the names in `netns` (a path), or in this namespace without one; never throws. */
export async function lookupHostnamesIn(
  netns: string | undefined,
  names: readonly string[],
  opts: LookupOptions = {},
): Promise<LookupRound> {
  if (!netns) return lookupHostnames(names, opts);
  const fail = (error: string): LookupRound => failedRound(names, `resolver of ${netns}`, error);
  const [cmd, ...args] = netnsCommand(netns, childCommand());
  // The child's own deadline is per name; this one bounds the whole round (a stuck child).
  const o = { ...LOOKUP_DEFAULTS, ...opts };
  const perRound = o.timeoutMs * Math.ceil(Math.min(names.length, o.maxNames) / o.concurrency) + 10_000;
  return new Promise((resolve) => {
    const p = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    const timer = setTimeout(() => p.kill('SIGKILL'), perRound);
    p.stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      if (out.length > MAX_OUTPUT) p.kill('SIGKILL');
    });
    p.stderr.setEncoding('utf8').on('data', (d: string) => (err = (err + d).slice(-2000)));
    p.on('error', (e) => {
      clearTimeout(timer);
      resolve(fail(`cannot start the lookup in ${netns}: ${e.message}`));
    });
    p.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code !== 0)
        return resolve(fail(`lookup in ${netns} failed (${signal ?? `exit ${code}`}): ${err.trim() || 'no message'}`));
      try {
        resolve(checkRound(JSON.parse(out), names));
      } catch (e) {
        resolve(fail(`lookup in ${netns}: bad output: ${errText(e)}`));
      }
    });
    p.stdin.end(JSON.stringify({ names, opts }));
  });
}

/** The child's answer, checked field by field (it is another process' output). */
function checkRound(value: unknown, names: readonly string[]): LookupRound {
  const r = value as LookupRound;
  if (!isObj(r) || typeof r.resolver !== 'string' || !Array.isArray(r.results)) throw new Error('not a lookup round');
  const wanted = new Set(names);
  const results = r.results.filter(
    (x) =>
      isObj(x) &&
      typeof x.hostname === 'string' &&
      wanted.has(x.hostname) &&
      Array.isArray(x.addresses) &&
      x.addresses.every(
        (a) => typeof a?.ip === 'string' && isIP(a.ip) !== 0 && typeof a.ttl === 'number' && a.ttl >= 0,
      ),
  );
  return {
    resolver: r.resolver,
    results,
    warnings: Array.isArray(r.warnings) ? r.warnings.filter((w) => typeof w === 'string') : [],
    ...(typeof r.error === 'string' ? { error: r.error } : {}),
  };
}
