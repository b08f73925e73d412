// The dns source: the addresses of the cluster's hostname-only LBs (AWS NLB and
// others publish only a name) as this node's resolver gives them
// (cluster/dns/lookup.ts; with --netns inside that namespace), looked up again
// as each answer's TTL runs out (cluster/dns/hostname-cache.ts: the reader's
// watch asks for a read when the next one is due). Up when every name resolved;
// down with the failing names and reasons, still carrying the answers it has
// (stale addresses of a failing name stay counted for a while); absent when
// the cluster has no hostname-only LB.
import { CACHE_DEFAULTS, HostnameCache } from '../cluster/dns/hostname-cache.js';
import { LOOKUP_DEFAULTS, type LookupRound } from '../cluster/dns/lookup.js';
import { lookupHostnamesIn } from '../cluster/dns/lookup-netns.js';
import type { HostnameLookup } from '../cluster/types.js';
import type { LiveOptions, ReadResult, SourceDef, SourceReader } from './contract.js';

export interface DnsSnapshot {
  lookups: HostnameLookup[];
}

/** Failing names listed in the status reason (the rest are counted). */
const REASON_NAMES = 3;
/** Reads for due names start at most this often, however short the TTLs. */
const MIN_GAP_MS = 1000;

export const dns: SourceDef<DnsSnapshot> = {
  name: 'dns',
  key: 'dns',
  indexes: true,
  followsCluster: true,
  live: (opts) => dnsReader(opts),
};

export function dnsReader(opts: LiveOptions, lookupIn: typeof lookupHostnamesIn = lookupHostnamesIn): SourceReader<DnsSnapshot> {
  const cache = new HostnameCache({ ...CACHE_DEFAULTS, maxNames: opts.dnsLookup?.maxNames ?? LOOKUP_DEFAULTS.maxNames });
  let timer: NodeJS.Timeout | undefined;
  let due: (() => void) | undefined;
  const arm = (): void => {
    clearTimeout(timer);
    const next = cache.nextDueIn(Date.now());
    if (next === undefined || !due) return;
    timer = setTimeout(due, Math.max(next, MIN_GAP_MS));
    timer.unref();
  };
  return {
    name: 'dns',
    key: 'dns',
    watch(events) {
      due = () => events.changed();
      arm();
      return () => {
        due = undefined;
        clearTimeout(timer);
      };
    },
    async read(): Promise<ReadResult<DnsSnapshot>> {
      const names = opts.lbHostnames?.() ?? [];
      const wantChanged = cache.want(names);
      if (names.length === 0) return { state: 'absent', reason: 'no hostname-only LoadBalancer Service' };
      const todo = cache.due(Date.now());
      let changed = wantChanged;
      let round: LookupRound | undefined;
      if (todo.length > 0) {
        round = await lookupIn(opts.netns, todo, opts.dnsLookup ?? {});
        changed = cache.record(round, Date.now()) || changed;
      }
      arm();
      if (!changed) return { state: 'unchanged' };
      const lookups = [...cache.lookups().values()];
      const value = { lookups };
      const warnings = round?.warnings ?? [];
      const failing = lookups.filter((l) => l.error);
      if (failing.length === 0) return { state: 'up', value, warnings };
      const listed = failing.slice(0, REASON_NAMES).map((l) => `${l.hostname}: ${l.error}`);
      const more = failing.length > REASON_NAMES ? ` (and ${failing.length - REASON_NAMES} more)` : '';
      const by = round?.resolver ?? failing[0]!.resolver;
      return { state: 'down', reason: `${failing.length} of ${names.length} LB hostnames not resolved by ${by}: ${listed.join('; ')}${more}`, value, warnings };
    },
  };
}

/** The lookups of a snapshot by name, for cluster/lb-hostnames.ts. */
export function lookupsByName(d: DnsSnapshot | undefined): Map<string, HostnameLookup> {
  return new Map((d?.lookups ?? []).map((l) => [l.hostname, l]));
}
