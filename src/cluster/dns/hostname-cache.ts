// Last resolver answer per hostname-only LB, re-asked at its shortest TTL within bounds; a failing name keeps
// its addresses, marked stale, for a while so a resolver outage does not hide a loop the kernel still shows.
import type { HostnameLookup } from '../types.js';
import type { LookupRound } from './lookup.js';

const CACHE_DEFAULTS = {
  /** A TTL below this is re-asked only this often (TTL 0 is common for LB names). */
  minTtlS: 5,
  /** Asked again at least this often, whatever the TTL. */
  maxTtlS: 300,
  /** After a failure, ask again after this long. */
  retryS: 10,
  /** Stale addresses are kept this long after their answer expired. */
  keepStaleS: 600,
  /** Names tracked at most (the rest are reported as not looked up). */
  maxNames: 256,
};

interface Entry {
  lookup?: HostnameLookup;
  /** ms epoch: when to look up again (0: never looked up). */
  dueAt: number;
  /** ms epoch: the good answer's expiry; stale addresses go keepStaleS after it. */
  expiresAt: number;
}

export class HostnameCache {
  private readonly entries = new Map<string, Entry>();
  private readonly limits: typeof CACHE_DEFAULTS;

  constructor(limits: Partial<typeof CACHE_DEFAULTS> = {}) {
    this.limits = { ...CACHE_DEFAULTS, ...limits };
  }

  /** The names the cluster view currently publishes; others are forgotten. Returns true when the set changed. */
  want(names: Iterable<string>): boolean {
    const wanted = new Set<string>();
    for (const n of names) if (wanted.size < this.limits.maxNames) wanted.add(n);
    const before = this.entries.size;
    for (const n of this.entries.keys()) if (!wanted.has(n)) this.entries.delete(n);
    const kept = this.entries.size;
    for (const n of wanted) if (!this.entries.has(n)) this.entries.set(n, { dueAt: 0, expiresAt: 0 });
    return kept !== before || this.entries.size !== kept;
  }

  /** Names whose lookup is due at `now` (ms epoch). */
  due(now: number): string[] {
    return [...this.entries].filter(([, e]) => e.dueAt <= now).map(([n]) => n);
  }

  /** ms until the next lookup is due (0: now), undefined without names. */
  nextDueIn(now: number): number | undefined {
    let min: number | undefined;
    for (const e of this.entries.values()) min = Math.min(min ?? Infinity, Math.max(0, e.dueAt - now));
    return min;
  }

  /** Takes a round's answers; returns true when any name's addresses or error changed. */
  record(round: LookupRound, now: number): boolean {
    const { minTtlS, maxTtlS, retryS, keepStaleS } = this.limits;
    let changed = false;
    for (const r of round.results) {
      const e = this.entries.get(r.hostname);
      if (!e) continue;
      const before = e.lookup;
      if (r.addresses.length > 0 && !r.error) {
        const ttlS = Math.min(...r.addresses.map((a) => a.ttl));
        const wait = Math.min(Math.max(ttlS, minTtlS), maxTtlS);
        const addresses = [...new Set(r.addresses.map((a) => a.ip))].sort();
        e.lookup = {
          hostname: r.hostname,
          addresses,
          ttlS,
          resolvedAt: new Date(now).toISOString(),
          resolver: round.resolver,
        };
        e.dueAt = now + wait * 1000;
        e.expiresAt = now + ttlS * 1000;
      } else {
        const keep = before && before.addresses.length > 0 && now <= e.expiresAt + keepStaleS * 1000;
        e.lookup = {
          hostname: r.hostname,
          addresses: keep ? before.addresses : [],
          ...(keep && before.ttlS !== undefined ? { ttlS: before.ttlS } : {}),
          ...(keep && before.resolvedAt ? { resolvedAt: before.resolvedAt } : {}),
          error: r.error ?? 'no address',
          resolver: round.resolver,
        };
        e.dueAt = now + retryS * 1000;
      }
      if (!sameLookup(before, e.lookup)) changed = true;
    }
    return changed;
  }

  /** The current answer per name (names never looked up yet are absent). */
  lookups(): Map<string, HostnameLookup> {
    const m = new Map<string, HostnameLookup>();
    for (const [n, e] of this.entries) if (e.lookup) m.set(n, e.lookup);
    return m;
  }
}

/** Same addresses and the same error: a new TTL alone changes nothing downstream. */
function sameLookup(a: HostnameLookup | undefined, b: HostnameLookup): boolean {
  return (
    a !== undefined &&
    a.error === b.error &&
    a.addresses.length === b.addresses.length &&
    a.addresses.every((x, i) => x === b.addresses[i])
  );
}
