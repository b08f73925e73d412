// Streaming conntrack correlation keeping only entries touching an LB VIP, a NodePort or a local endpoint.
// An L4 loop is two entries of one client pod:port: out to VIP:port, back from the uplink to nodeIP:NodePort
// (or, with an LB targeting pods, straight to a local pod).
import { shareAService } from '../cluster/lb-index.js';
import type { ServiceView } from '../cluster/types.js';
import type { ConntrackEntry } from '../kernel/types.js';
import { protocolOfNumber as protoOf } from '../model/protocol.js';
import type { DetectContext } from './context.js';

/** What the correlator can tell from conntrack entries; each detector lists those it reads (observes). */
export const OBS_KINDS = ['l4', 'direct', 'noSnat', 'selfVip', 'refused', 'l7', 'hcSrc'] as const;
export type ObsKind = (typeof OBS_KINDS)[number];

/** Observations of one kind for one Service port. */
export interface ObsGroup {
  kind: ObsKind;
  svc: ServiceView;
  count: number;
  /** Up to MAX_EXAMPLES examples; pairs are [outbound, inbound]. */
  examples: ConntrackEntry[][];
}

export interface Observations {
  groups: ObsGroup[];
  /** Entries seen in total, and kept for pairing. */
  seen: number;
  pending: number;
  /** Set when the pending maps hit their cap and entries were not kept. */
  overflowed: number;
}

const MAX_EXAMPLES = 3;
/** Unpaired entries kept per map; beyond it pairing is incomplete (reported, not silent). */
const MAX_PENDING = 200_000;
/** Entries kept per pairing key, so that each lookup of one stays bounded; beyond it too pairing is incomplete. */
const MAX_PER_KEY = 1_000;
/** L7 legs without timestamps are paired by coexistence; with them, within this window. */
const L7_WINDOW_NS = 30n * 1_000_000_000n;

interface Pending {
  entry: ConntrackEntry;
  svcs: ServiceView[];
}

const sockKey = (entry: ConntrackEntry): string => `${entry.orig.src}|${entry.orig.protoNum}|${entry.orig.sport}`;
const seenReply = (entry: ConntrackEntry): boolean => entry.statusFlags.includes('SEEN_REPLY');

export class ConntrackCorrelator {
  private readonly outbound = new Map<string, Pending[]>();
  /** Return legs: to nodeIP:NodePort (l4) or to a local endpoint (direct). */
  private readonly inbound = new Map<string, { kind: 'l4' | 'direct'; p: Pending }[]>();
  /** Outbound legs to an Ingress VIP by client IP, then by each Service behind that VIP (what pairL7 looks up). */
  private readonly l7Out = new Map<string, Map<ServiceView, ConntrackEntry[]>>();
  private l7OutKept = 0;
  private readonly l7In: Pending[] = [];
  private readonly groups = new Map<string, ObsGroup>();
  private seen = 0;
  private overflowed = 0;
  private done?: Observations;

  /** `wanted`: the kinds some detector reads (list.ts OBSERVED_KINDS); entries of other kinds are not kept. */
  constructor(
    private readonly ctx: DetectContext,
    private readonly wanted: ReadonlySet<ObsKind> = new Set(OBS_KINDS),
  ) {}

  add(entry: ConntrackEntry): void {
    if (this.done) throw new Error('ConntrackCorrelator.add() after observations()');
    this.seen++;
    const proto = protoOf(entry.orig.protoNum);
    if (!proto || entry.orig.dport === undefined) return;
    const { ctx } = this;
    const o = entry.orig;
    const vipSvcs = ctx.lb.lbVipServices(o.dst, proto, o.dport);

    if (vipSvcs && o.src === o.dst) {
      if (!seenReply(entry)) this.record('selfVip', vipSvcs, [entry]);
      return;
    }
    if (vipSvcs && ctx.isLocalSource(o.src)) this.addOutbound(entry, vipSvcs, proto);
    const hcSvcs = ctx.lb.lbIpServices(o.src);
    if (hcSvcs && ctx.ipvsBound.has(o.src) && ctx.nodeIps.has(o.dst) && !seenReply(entry))
      this.record('hcSrc', hcSvcs, [entry]);

    const ingSvcs = ctx.lb.ingressVipServices(o.dst);
    if (ingSvcs && ctx.isLocalSource(o.src)) this.keepL7Out(entry, ingSvcs);

    if (!ctx.isLocalSource(o.src)) return;
    const { nodePort: npSvc, endpoints: epSvcs } = ctx.lb.returnLeg(entry, ctx.nodeIps, ctx.isPodIp);
    if (npSvc) {
      this.addInbound(entry, 'l4', [npSvc]);
      if (npSvc.ingressVips.length > 0 && this.l7In.length < MAX_PENDING) this.l7In.push({ entry, svcs: [npSvc] });
      else if (npSvc.ingressVips.length > 0) this.overflowed++;
    }
    if (epSvcs) this.addInbound(entry, 'direct', epSvcs);
  }

  private addOutbound(entry: ConntrackEntry, svcs: ServiceView[], proto: string): void {
    const { ctx } = this;
    const o = entry.orig;
    const leftNode = entry.reply.src === o.dst; // not DNATed here: the packet went to the LB
    if (leftNode && ctx.isPodIp(o.src) && entry.reply.dst === o.src) this.record('noSnat', svcs, [entry]);
    if (
      leftNode &&
      ctx.ipvsBound.has(o.dst) &&
      ctx.input.node.ipvs !== undefined &&
      !ctx.ipvsService(o.dst, proto, o.dport ?? 0)
    ) {
      this.record('refused', svcs, [entry]);
    }
    const k = sockKey(entry);
    const paired = takeWhere(this.inbound, k, (b) => shareAService(b.p.svcs, svcs));
    for (const b of paired) this.record(b.kind, svcs, [entry, b.p.entry]);
    if (paired.length === 0) this.keep(this.outbound, k, { entry, svcs });
  }

  private addInbound(entry: ConntrackEntry, kind: 'l4' | 'direct', svcs: ServiceView[]): void {
    const k = sockKey(entry);
    const paired = takeWhere(this.outbound, k, (p) => shareAService(p.svcs, svcs));
    for (const p of paired) this.record(kind, p.svcs, [p.entry, entry]);
    if (paired.length === 0) this.keep(this.inbound, k, { kind, p: { entry, svcs } });
  }

  private keep<T>(m: Map<string, T[]>, k: string, p: T): void {
    if (!pushBounded(m, k, p)) this.overflowed++;
  }

  private keepL7Out(entry: ConntrackEntry, svcs: ServiceView[]): void {
    let bySvc = this.l7Out.get(entry.orig.src);
    if (!bySvc && this.l7Out.size < MAX_PENDING) {
      bySvc = new Map();
      this.l7Out.set(entry.orig.src, bySvc);
    }
    // Listed under each Service behind the VIP, counted once: kept if any of its lists took it.
    let kept = false;
    if (bySvc) for (const svc of svcs) kept = pushBounded(bySvc, svc, entry) || kept;
    if (kept) this.l7OutKept++;
    else this.overflowed++;
  }

  private record(kind: ObsKind, svcs: ServiceView[], entries: ConntrackEntry[]): void {
    if (!this.wanted.has(kind)) return;
    for (const svc of svcs) {
      const k = `${kind}|${svc.namespace}/${svc.name}|${svc.protocol}|${svc.port}`;
      let g = this.groups.get(k);
      if (!g) {
        g = { kind, svc, count: 0, examples: [] };
        this.groups.set(k, g);
      }
      g.count++;
      if (g.examples.length < MAX_EXAMPLES) g.examples.push(entries);
    }
  }

  /** L7 legs: same client IP, different source port, inbound to the NodePort of a Service behind that Ingress VIP. */
  private pairL7(): void {
    for (const inb of this.l7In) {
      const svc = inb.svcs[0]!;
      const outs = this.l7Out.get(inb.entry.orig.src)?.get(svc) ?? [];
      const match = outs.find(
        (o) => o.orig.sport !== inb.entry.orig.sport && withinWindow(o.startNs, inb.entry.startNs),
      );
      if (match) this.record('l7', [svc], [match, inb.entry]);
    }
    this.l7In.length = 0;
  }

  /** Ends the stream: pairs the L7 legs and returns what was found. Call once, after the last add(). */
  observations(): Observations {
    if (this.done) return this.done;
    let pending = this.l7In.length + this.l7OutKept;
    this.pairL7();
    for (const m of [this.outbound, this.inbound]) for (const v of m.values()) pending += v.length;
    this.done = { groups: [...this.groups.values()], seen: this.seen, pending, overflowed: this.overflowed };
    return this.done;
  }
}

/**
 * Appends `item` to k's list; past the list's cap its oldest item goes, since a loop pairs recent legs. False when
 * an item was lost: that oldest one, or `item` when the map's keys are at their cap.
 */
function pushBounded<K, T>(m: Map<K, T[]>, k: K, item: T): boolean {
  const list = m.get(k);
  if (list) {
    list.push(item);
    if (list.length <= MAX_PER_KEY) return true;
    list.shift();
    return false;
  }
  if (m.size >= MAX_PENDING) return false;
  m.set(k, [item]);
  return true;
}

/** Takes the items of k's list that `accept` takes; the others stay. */
function takeWhere<K, T>(m: Map<K, T[]>, k: K, accept: (item: T) => boolean): T[] {
  const taken: T[] = [];
  const rest: T[] = [];
  for (const item of m.get(k) ?? []) (accept(item) ? taken : rest).push(item);
  if (taken.length === 0) return taken;
  if (rest.length > 0) m.set(k, rest);
  else m.delete(k);
  return taken;
}

function withinWindow(a: bigint | undefined, b: bigint | undefined): boolean {
  if (a === undefined || b === undefined) return true;
  const d = a > b ? a - b : b - a;
  return d <= L7_WINDOW_NS;
}
