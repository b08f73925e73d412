// Evidence for one Service over the Unix socket: its addresses, its classified conntrack entries, then new ones
// when watching; one JSON object per line so `clbprobe evidence` can stream it.

import { slicePort } from '../cluster/endpoints.js';
import type { ServiceView } from '../cluster/types.js';
import { formatConntrack } from '../kernel/conntrack/format.js';
import type { ConntrackEntry } from '../kernel/types.js';
import { classifyEntry, type EntryClass, type KeptEntry } from './conntrack-table.js';
import type { EvidenceOwnership } from './evidence-ownership.js';

export interface EvidenceRequest {
  /** NS/NAME */
  service: string;
  port?: number;
  /** Keep streaming new entries for this many seconds. */
  watchS?: number;
}

export interface ServiceAddresses {
  namespace: string;
  name: string;
  ports: { port: number; protocol: string; nodePort?: number }[];
  vips: string[];
  endpoints: { address: string; port?: number }[];
  /** The uplink the agent counts on (for a local pcap capture). */
  ifname?: string;
}

export type EvidenceLine =
  | { type: 'service'; service: ServiceAddresses; node: string }
  | {
      type: 'entry';
      class: EntryClass;
      line: string;
      firstSeen: string;
      lastSeen: string;
      entry: ConntrackEntry;
      live: boolean;
    }
  /** truncated: entries were left out (the server's caps), notSent of them, reason says which cap. */
  | { type: 'end'; entries: number; truncated?: boolean; notSent?: number; reason?: string }
  | { type: 'error'; message: string };

export function parseServiceRef(ref: string): { namespace: string; name: string } {
  const m = /^([a-z0-9.-]+)\/([a-z0-9.-]+)$/.exec(ref);
  if (!m) throw new Error(`--service must be NAMESPACE/NAME, not ${JSON.stringify(ref)}`);
  return { namespace: m[1]!, name: m[2]! };
}

export function serviceAddresses(svcs: ServiceView[], ifname?: string): ServiceAddresses {
  const first = svcs[0]!;
  const endpoints = new Map<string, { address: string; port?: number }>();
  for (const s of svcs) {
    for (const ep of s.endpoints) {
      const port = slicePort(s, ep);
      endpoints.set(`${ep.address}|${port}`, { address: ep.address, ...(port ? { port } : {}) });
    }
  }
  return {
    namespace: first.namespace,
    name: first.name,
    ports: svcs.map((s) => ({ port: s.port, protocol: s.protocol, ...(s.nodePort ? { nodePort: s.nodePort } : {}) })),
    vips: [...new Set(svcs.flatMap((s) => s.lbIngress.map((i) => i.ip)))],
    endpoints: [...endpoints.values()],
    ...(ifname ? { ifname } : {}),
  };
}

/** Evidence matches one of these Service ports (by name: views are rebuilt) and has a tie its owner cannot forge. */
export function isEvidenceFor(kept: KeptEntry, svcs: ServiceView[], ownership: EvidenceOwnership): boolean {
  const matches = (s: ServiceView): boolean =>
    svcs.some(
      (t) => t.namespace === s.namespace && t.name === s.name && t.port === s.port && t.protocol === s.protocol,
    );
  return kept.svcs.some(matches) && ownership.owns(kept.entry, svcs);
}

export function entryLine(kept: KeptEntry, live: boolean): EvidenceLine {
  return {
    type: 'entry',
    class: classifyEntry(kept),
    line: formatConntrack(kept.entry),
    firstSeen: new Date(kept.firstSeenMs).toISOString(),
    lastSeen: new Date(kept.lastSeenMs).toISOString(),
    // The plain entry, as decoded (the kept form's names and addresses are getters JSON would not see).
    entry: kept.entry.toEntry(),
    live,
  };
}
