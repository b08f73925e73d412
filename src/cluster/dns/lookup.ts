// Looks up hostname-only LB names with this node's resolver via node:dns, keeping TTLs, bounded in time and number.
import { Resolver } from 'node:dns/promises';
import { open } from 'node:fs/promises';
import { errText } from '../../errors.js';
import { MAX_RESOLV_CONF_BYTES, parseResolvConf, type ResolvConf } from './resolv-conf.js';

const RESOLV_CONF = '/etc/resolv.conf';

export const LOOKUP_DEFAULTS = {
  /** Names beyond this many in one round are not looked up (reported as such). */
  maxNames: 256,
  concurrency: 8,
  /** Whole-name deadline (A and AAAA together), whatever resolv.conf says. */
  timeoutMs: 5000,
  /** Addresses kept per name and family. */
  maxAddresses: 16,
};
export type LookupOptions = Partial<typeof LOOKUP_DEFAULTS> & { resolvConf?: string };

export interface LookupResult {
  hostname: string;
  /** A then AAAA records, each with its TTL in seconds; empty on failure. */
  addresses: { ip: string; ttl: number }[];
  /** Why there are no addresses (NXDOMAIN, timeout, ...); undefined on success. */
  error?: string;
}

export interface LookupRound {
  /** The resolver used, for evidence: "nameserver 10.96.0.10 (/etc/resolv.conf)". */
  resolver: string;
  results: LookupResult[];
  /** The whole round failed (no resolv.conf, no nameserver): every result carries this error too. */
  error?: string;
  warnings: string[];
}

/** A round in which no name was looked up, each result carrying the round's error. */
export function failedRound(
  names: readonly string[],
  resolver: string,
  error: string,
  warnings: string[] = [],
): LookupRound {
  return { resolver, error, warnings, results: names.map((hostname) => ({ hostname, addresses: [], error })) };
}

/** RFC 1035 name syntax, 253 characters at most: anything else is never sent. */
const HOSTNAME =
  /^(?=.{1,253}\.?$)([A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\.)*[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\.?$/;

export function isHostname(name: string): boolean {
  return HOSTNAME.test(name);
}

/** c-ares error codes as an on-call engineer knows them. */
const REASONS: Record<string, string> = {
  ENOTFOUND: 'NXDOMAIN (name does not exist)',
  ENODATA: 'no A or AAAA record',
  ETIMEOUT: 'timeout (no answer from the nameserver)',
  ESERVFAIL: 'SERVFAIL from the nameserver',
  EREFUSED: 'REFUSED by the nameserver',
  ECONNREFUSED: 'connection refused by the nameserver',
  EBADRESP: 'malformed answer',
  EFORMERR: 'FORMERR (the nameserver rejected the query)',
  ECANCELLED: 'timeout (cancelled after the deadline)',
};

const reasonOf = (e: unknown): string => {
  const code = (e as { code?: string }).code;
  return (code && REASONS[code]) ?? errText(e);
};

async function readResolvConf(path: string): Promise<ResolvConf> {
  const f = await open(path, 'r');
  try {
    const buf = Buffer.alloc(MAX_RESOLV_CONF_BYTES + 1);
    const { bytesRead } = await f.read(buf, 0, buf.length, 0);
    return parseResolvConf(buf.subarray(0, bytesRead).toString('utf8'), path);
  } finally {
    await f.close();
  }
}

/** Looks up every name in this process' network namespace; never throws. */
export async function lookupHostnames(names: readonly string[], opts: LookupOptions = {}): Promise<LookupRound> {
  const path = opts.resolvConf ?? RESOLV_CONF;
  const { maxNames, concurrency, timeoutMs, maxAddresses } = { ...LOOKUP_DEFAULTS, ...opts };

  let conf: ResolvConf;
  try {
    conf = await readResolvConf(path);
  } catch (e) {
    return failedRound(names, path, `cannot read ${path}: ${errText(e)}`);
  }
  const resolverText = `nameserver ${conf.nameservers.join(', ') || '(none)'} (${path})`;
  if (conf.nameservers.length === 0) return failedRound(names, resolverText, `no nameserver in ${path}`, conf.warnings);
  // One channel per name, as c-ares fails every query pending on a connection that got a malformed answer.
  const resolverFor = (): Resolver => {
    const r = new Resolver({ timeout: Math.min(conf.timeoutS * 1000, timeoutMs), tries: conf.attempts });
    r.setServers(conf.nameservers);
    return r;
  };
  try {
    resolverFor().cancel();
  } catch (e) {
    return failedRound(names, resolverText, `nameservers not usable: ${errText(e)}`, conf.warnings);
  }
  const live = new Set<Resolver>();

  const one = async (hostname: string): Promise<LookupResult> => {
    if (!isHostname(hostname)) return { hostname, addresses: [], error: 'not a valid DNS name (never sent)' };
    // Absolute: a search list must not turn an LB name into something else (ndots:5 in pods).
    const q = hostname.endsWith('.') ? hostname : `${hostname}.`;
    const resolver = resolverFor();
    live.add(resolver);
    const [v4, v6] = await Promise.allSettled([
      resolver.resolve4(q, { ttl: true }),
      resolver.resolve6(q, { ttl: true }),
    ]).finally(() => {
      live.delete(resolver);
      resolver.cancel();
    });
    const records = (answer: typeof v4): LookupResult['addresses'] =>
      answer.status === 'fulfilled'
        ? answer.value.slice(0, maxAddresses).map((r) => ({ ip: r.address, ttl: r.ttl }))
        : [];
    const addresses = [...records(v4), ...records(v6)];
    if (addresses.length > 0) return { hostname, addresses };
    // Both failed: the A query's reason, unless it only said "no A record" and AAAA failed otherwise.
    const e4 = v4.status === 'rejected' ? v4.reason : undefined;
    const e6 = v6.status === 'rejected' ? v6.reason : undefined;
    const first = (e4 as { code?: string })?.code === 'ENODATA' && e6 ? e6 : (e4 ?? e6);
    return { hostname, addresses: [], error: first ? reasonOf(first) : 'no A or AAAA record' };
  };

  const withDeadline = (hostname: string): Promise<LookupResult> => {
    let timer: NodeJS.Timeout | undefined;
    const error = `timeout (no answer within ${timeoutMs} ms)`;
    const late = new Promise<LookupResult>((resolve) => {
      timer = setTimeout(() => resolve({ hostname, addresses: [], error }), timeoutMs);
    });
    return Promise.race([one(hostname), late]).finally(() => clearTimeout(timer));
  };

  const todo = names.slice(0, maxNames);
  const results: LookupResult[] = new Array(todo.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < todo.length) {
      const i = next++;
      results[i] = await withDeadline(todo[i]!);
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(Math.max(1, concurrency), todo.length) }, worker));
  } finally {
    // Names past their deadline: stop their queries.
    for (const r of live) r.cancel();
  }
  const error = `not looked up: more than ${maxNames} hostname-only LBs (--dns-max-names)`;
  for (const hostname of names.slice(maxNames)) results.push({ hostname, addresses: [], error });
  return { resolver: resolverText, results, warnings: conf.warnings };
}
