// The dns source: hostname-only LB addresses from this node's resolver, re-asked at TTL; up when all resolved,
// down with the failing names and the answers it has, absent without such LBs. In a bundle: dns-lookups.json.
import { BUNDLE_FILES } from '../bundle/names.js';
import { formatDnsLookups, parseDnsLookups } from '../bundle/parse-dns.js';
import { ms, writeStep } from '../bundle/writer.js';
import { HostnameCache } from '../cluster/dns/hostname-cache.js';
import { LOOKUP_DEFAULTS, type LookupRound } from '../cluster/dns/lookup.js';
import { lookupHostnamesIn } from '../cluster/dns/lookup-netns.js';
import type { HostnameLookup } from '../cluster/types.js';
import { type LiveOptions, type ReadResult, readerOf, type SourceDef, type SourceReader } from './contract.js';
import type { NodeSnapshot } from './node-snapshot.js';

export type DnsSnapshot = NonNullable<NodeSnapshot['dns']>;

/** Failing names listed in the status reason (the rest are counted). */
const REASON_NAMES = 3;
/** Reads for due names start at most this often, however short the TTLs. */
const MIN_GAP_MS = 1000;

const NO_HOSTNAME_LB = 'no hostname-only LoadBalancer Service';

/** Up when every name resolved, else down naming the failures; names past the cap make up degraded. */
function resultOf(
  lookups: HostnameLookup[],
  names: number,
  resolver: string | undefined,
  warnings: string[],
  notLookedUp: string[] = [],
): ReadResult<DnsSnapshot> {
  const value = { lookups };
  const failing = lookups.filter((l) => l.error);
  const capped = notLookedUp.length
    ? `${notLookedUp.length} of ${names} LB hostnames not looked up: more than --dns-max-names ` +
      `${names - notLookedUp.length} (${notLookedUp.slice(0, REASON_NAMES).join(', ')}` +
      `${notLookedUp.length > REASON_NAMES ? ', ...' : ''})`
    : undefined;
  if (failing.length === 0) return { state: 'up', value, warnings, ...(capped ? { note: capped } : {}) };
  const listed = failing.slice(0, REASON_NAMES).map((l) => `${l.hostname}: ${l.error}`);
  const more = failing.length > REASON_NAMES ? ` (and ${failing.length - REASON_NAMES} more)` : '';
  const by = resolver ?? failing[0]!.resolver;
  const reason = `${failing.length} of ${names} LB hostnames not resolved by ${by}: ${listed.join('; ')}${more}`;
  return { state: 'down', reason: capped ? `${reason}; ${capped}` : reason, value, warnings };
}

export const dns: SourceDef<DnsSnapshot> = {
  name: 'dns',
  key: 'dns',
  indexes: true,
  followsCluster: true,
  live: (opts) => dnsReader(opts),
  /** One round of lookups, as the live reader makes it, of the names the bundle's cluster view publishes. */
  async collect(writer) {
    const names = writer.lbHostnames;
    const command =
      `look up ${names.length} hostname-only LB name(s) with the ` +
      `${writer.netns ? `namespace's (${writer.netns})` : "node's"} resolver`;
    if (names.length === 0) return writer.skip(command, `${NO_HOSTNAME_LB} in the cluster view (or no cluster view)`);
    const t0 = performance.now();
    const r = await dnsReader({ ...(writer.netns ? { netns: writer.netns } : {}), lbHostnames: () => names }).read();
    if (r.state === 'up' || (r.state === 'down' && r.value)) {
      const text = formatDnsLookups(r.value!.lookups);
      const error = r.state === 'down' ? r.reason : undefined;
      return writer.add(writeStep(writer.out, BUNDLE_FILES.dnsLookups, command, text, t0, error));
    }
    const error = r.state === 'down' || r.state === 'absent' ? r.reason : 'no lookup made';
    writer.add({ command, durationMs: ms(t0), error });
  },
  fromBundle(bundle) {
    const file = BUNDLE_FILES.dnsLookups;
    // Whether the cluster has hostname-only LBs is the bundle reader's to say (it reads the cluster after the sources).
    if (!bundle.has(file)) return { state: 'absent', reason: bundle.whyMissing(file) };
    const { lookups, warnings } = parseDnsLookups(bundle.text(file), bundle.path(file));
    return resultOf(lookups, lookups.length, undefined, warnings);
  },
};

export function dnsReader(
  opts: LiveOptions,
  lookupIn: typeof lookupHostnamesIn = lookupHostnamesIn,
): SourceReader<DnsSnapshot> {
  const maxNames = opts.dnsLookup?.maxNames ?? LOOKUP_DEFAULTS.maxNames;
  const cache = new HostnameCache({ maxNames });
  let timer: NodeJS.Timeout | undefined;
  let due: (() => void) | undefined;
  const arm = (): void => {
    clearTimeout(timer);
    const next = cache.nextDueIn(Date.now());
    if (next === undefined || !due) return;
    timer = setTimeout(due, Math.max(next, MIN_GAP_MS));
    timer.unref();
  };
  return readerOf(
    dns,
    async () => {
      const names = opts.lbHostnames?.() ?? [];
      const wantChanged = cache.want(names);
      if (names.length === 0) return { state: 'absent', reason: NO_HOSTNAME_LB };
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
      return resultOf(lookups, names.length, round?.resolver, round?.warnings ?? [], names.slice(maxNames));
    },
    (events) => {
      due = () => events.changed();
      arm();
      return () => {
        due = undefined;
        clearTimeout(timer);
      };
    },
  );
}

/** The lookups of a snapshot by name, for cluster/lb-hostnames.ts. */
export function lookupsByName(dns: DnsSnapshot | undefined): Map<string, HostnameLookup> {
  return new Map((dns?.lookups ?? []).map((l) => [l.hostname, l]));
}
