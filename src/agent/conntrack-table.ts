// The conntrack entries touching an LB Service (VIP, NodePort or endpoints), fed by events and rebuilt by dumps;
// pairs loopback legs, classifies entries for evidence and counts finished VIP flows by outcome.
import { shareAService } from '../cluster/lb-index.js';
import type { ServiceView } from '../cluster/types.js';
import { CompactEntry } from '../kernel/conntrack/compact.js';
import { IPS_SEEN_REPLY } from '../kernel/conntrack/constants.js';
import { CtView } from '../kernel/conntrack/decode.js';
import type { ConntrackEntry, ConntrackEventType } from '../kernel/types.js';
import { addTo, type Key, key, type OneOrMore, removeFrom } from '../model/address-key.js';
import type { FlowOutcome } from '../model/flow.js';
import { protocolOfNumber as protoOf } from '../model/protocol.js';
import { portKey, type ServicePortLabels, servicePortLabels } from '../model/service.js';
import type { EntryMatch, ServiceIndex } from './service-index.js';

export type EntryClass = 'loopback_pair' | 'not_snated' | 'unreplied' | 'healthy';

/** Finished VIP flows of one Service port, one count per outcome. */
export type FlowCounts = { svc: ServicePortLabels } & Record<FlowOutcome, number>;

export interface KeptEntry {
  /** Replaced by a new object when the kernel reports a change (the diagnosis compares by identity). */
  entry: CompactEntry;
  svcs: ServiceView[];
  toVip: boolean;
  /** When the agent first/last saw it (Date.now()); the kernel's own timestamps are off by default. */
  firstSeenMs: number;
  lastSeenMs: number;
  /** Part of a loopback pair (set once, kept after the partner is gone). */
  paired: boolean;
  generation: number;
}

/** The client socket (source address, protocol, port) as the shared numeric key (a number for IPv4). */
const sockKey = (e: CompactEntry): Key =>
  key(e.orig.src, protoOf(e.orig.protoNum) ?? String(e.orig.protoNum), e.orig.sport);
const replied = (e: CompactEntry): boolean => (e.status & IPS_SEEN_REPLY) !== 0;
/**
 * Left the node (not DNATed here: the reply comes from the VIP) with the client's address unchanged as the reply's
 * destination: no SNAT on the way out. A flow kube-proxy DNATs to a local endpoint never reaches the LB.
 */
const notSnated = (e: CompactEntry): boolean => e.reply.src === e.orig.dst && e.reply.dst === e.orig.src;

/** A message decoded in place (the agent's streams: read it before the buffer is reused) or a decoded entry. */
export type EntrySource = CtView | ConntrackEntry;

/** Only what is kept is allocated: a view is compacted straight from the receive buffer. */
const compact = (source: EntrySource, prev?: CompactEntry): CompactEntry | undefined =>
  source instanceof CtView ? CompactEntry.fromView(source, prev) : CompactEntry.fromEntry(source, prev);

export function classifyEntry(kept: KeptEntry): EntryClass {
  if (kept.paired) return 'loopback_pair';
  if (kept.toVip && notSnated(kept.entry)) return 'not_snated';
  return replied(kept.entry) ? 'healthy' : 'unreplied';
}

/** The same flow: the kernel's CTA_ID is a 32-bit hash, so only the zone and original tuple tell two flows apart. */
const sameFlow = (k: KeptEntry, source: EntrySource): boolean =>
  k.entry.zone === source.zone &&
  (source instanceof CtView ? k.entry.orig.sameAsView(source.orig, source.buf) : k.entry.orig.sameAs(source.orig));

export class ConntrackTable {
  /** By CTA_ID as a signed 32-bit integer (CompactEntry.id32): small-integer keys, no heap number each. */
  private readonly byId = new Map<number, OneOrMore<KeptEntry>>();
  /** By client socket: two entries share one when they are the two legs of a loop. */
  private readonly bySock = new Map<Key, OneOrMore<KeptEntry>>();
  private count = 0;
  private generation = 0;
  /** Entries of an LB Service refused because the table was full, since start (a dump's refusals count again). */
  dropped = 0;
  /** Finished VIP flows per Service port (keyed by portKey: its labels object is per cluster view). */
  readonly outcomes = new Map<string, FlowCounts>();
  /** Called for each new entry kept (evidence --watch). */
  readonly listeners = new Set<(k: KeptEntry) => void>();

  constructor(
    private index: ServiceIndex,
    private readonly maxEntries = 100_000,
  ) {}

  get size(): number {
    return this.count;
  }

  /** While full, a new entry (a loop's legs too) is not kept: what the diagnosis sees of conntrack is partial. */
  get fullNote(): string | undefined {
    if (this.count < this.maxEntries) return undefined;
    return (
      `conntrack table full at ${this.maxEntries} entries: ${this.dropped} entries refused since start, ` +
      'so a loop among them cannot be shown'
    );
  }

  /** Grows on every change to what is kept or counted: what was derived from the table is stale when it moved. */
  get changes(): number {
    return this.changeCount;
  }
  private changeCount = 0;

  *entries(): IterableIterator<KeptEntry> {
    for (const held of this.byId.values()) {
      if (Array.isArray(held)) yield* held;
      else yield held;
    }
  }

  /** The Service index entries are matched with now (evidence judges ownership against the same view). */
  get serviceIndex(): ServiceIndex {
    return this.index;
  }

  /** A new cluster view or address set: re-match what is kept. */
  reindex(index: ServiceIndex): void {
    this.index = index;
    this.changeCount++;
    // Removing while walking is safe: a Map skips deleted keys and removeFrom() replaces a list, never edits it.
    for (const k of this.entries()) {
      const m = index.match(k.entry);
      if (m) {
        k.svcs = m.svcs;
        k.toVip = m.toVip;
      } else this.remove(k, false);
    }
  }

  /** Applies an event; true when a kept entry appeared, changed or ended (worth a diagnosis). */
  event(type: ConntrackEventType, source: EntrySource, nowMs: number): boolean {
    const kept = this.find(source);
    if (type === 'DESTROY') return kept !== undefined && this.remove(kept, true);
    return this.put(source, kept, nowMs) || kept !== undefined;
  }

  /** A full re-read starts; what it returns is given to endResync(), which drops the entries it did not see. */
  beginResync(): number {
    return ++this.generation;
  }

  /** Keeps (or updates) an entry that touches an LB Service; true when it is new. */
  upsert(source: EntrySource, nowMs: number): boolean {
    return this.put(source, this.find(source), nowMs);
  }

  /** upsert() once the kept entry of this flow, if any, is known. */
  private put(source: EntrySource, old: KeptEntry | undefined, nowMs: number): boolean {
    if (old) {
      const next = compact(source, old.entry);
      if (next) this.update(old, next, nowMs);
      return false;
    }
    // A view is compacted to be read at all; a decoded entry is matched first, so only a kept one is copied.
    const candidate = source instanceof CtView ? CompactEntry.fromView(source) : source;
    const m = candidate && this.index.match(candidate);
    if (!m) return false;
    if (this.count >= this.maxEntries) {
      this.dropped++;
      return false;
    }
    const c = candidate instanceof CompactEntry ? candidate : compact(candidate);
    return c ? this.add(c, m, nowMs) : false;
  }

  private find(source: EntrySource): KeptEntry | undefined {
    const held = this.byId.get(source.id | 0);
    if (held === undefined || Array.isArray(held)) return held?.find((k) => sameFlow(k, source));
    return sameFlow(held, source) ? held : undefined;
  }

  private update(k: KeptEntry, e: CompactEntry, nowMs: number): void {
    this.changeCount++;
    k.entry = e;
    k.lastSeenMs = nowMs;
    k.generation = this.generation;
  }

  private add(entry: CompactEntry, match: EntryMatch, nowMs: number): boolean {
    this.changeCount++;
    const k: KeptEntry = {
      entry,
      svcs: match.svcs,
      toVip: match.toVip,
      firstSeenMs: nowMs,
      lastSeenMs: nowMs,
      paired: false,
      generation: this.generation,
    };
    this.count++;
    addTo(this.byId, entry.id32, k);
    const sharing = addTo(this.bySock, sockKey(entry), k);
    if (Array.isArray(sharing)) this.pair(sharing);
    for (const l of this.listeners) l(k);
    return true;
  }

  /**
   * Drops entries the read begun as `read` missed (their DESTROY was lost or queued) and counts their outcome now,
   * once. Whatever any read or event saw since it began is newer, so reads that overlap keep each other's entries.
   */
  endResync(read: number): void {
    for (const k of this.entries()) if (k.generation < read) this.remove(k, true);
  }

  /** An outbound entry to a VIP plus a return leg of one of its Services from the same local socket. */
  private pair(ks: readonly KeptEntry[]): void {
    const out = ks.filter((k) => k.toVip && this.index.isLocal(k.entry.orig.src));
    if (!out.length) return;
    const back = ks.filter((k) => !k.toVip).map((k) => ({ k, svcs: this.index.returnLegServices(k.entry) }));
    for (const o of out) {
      for (const b of back) {
        if (!shareAService(b.svcs, o.svcs)) continue;
        o.paired = true;
        b.k.paired = true;
      }
    }
  }

  private remove(k: KeptEntry, finished: boolean): boolean {
    this.changeCount++;
    this.count--;
    removeFrom(this.byId, k.entry.id32, k);
    removeFrom(this.bySock, sockKey(k.entry), k);
    if (finished && k.toVip) {
      const c = classifyEntry(k);
      const o: FlowOutcome = c === 'healthy' ? 'replied' : c;
      for (const s of k.svcs) {
        const svc = servicePortLabels(s, s.protocol, s.port);
        const id = portKey(s, s.protocol, s.port);
        let counts = this.outcomes.get(id);
        if (!counts) {
          counts = { svc, replied: 0, unreplied: 0, loopback_pair: 0, not_snated: 0 };
          this.outcomes.set(id, counts);
        }
        counts[o]++;
      }
    }
    return true;
  }
}
