// The eBPF counter backend: loads clbprobe.bpf.c's object, attaches it to the uplink (attach.ts), keeps its maps
// equal to the target sets, reads the per-CPU counters, and re-attaches to a re-created uplink of the same link kind.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { errText } from '../errors.js';
import { NetlinkError } from '../kernel/netlink/socket.js';
import type { Logger } from '../log.js';
import { projectRoot } from '../native/addon.js';
import { type BpfAddon, type BpfObject, bpfAddon, readPerCpuU64 } from '../native/bpf.js';
import { type Attachment, attachPrograms, removeTcLeftovers } from './attach.js';
import {
  COUNTER_KEY_SIZE,
  COUNTER_VALUE_SIZE,
  CTR_VAL_BYTES,
  CTR_VAL_PACKETS,
  decodeCounterKey,
  MAP_COUNTERS,
  MAP_SLOTS,
  MAP_SLOTS_SEEN,
  MAP_STATS,
  MAX_VIPS_PER_FAMILY,
  PROG_EGRESS,
  PROG_INGRESS,
  SLOTS_SEEN_VALUE_SIZE,
  STAT_COUNTERS_FULL,
} from './bpf-layout.js';
import type { Counter, CounterOptions } from './counter-types.js';
import { type SlotAllocator, TARGET_MAPS, TargetSync } from './ebpf-maps.js';
import { CaptureError, captureError, kernelLacksIt, step } from './errors.js';
import { ENODEV, type LinkNow, LinkPackets, type PacketCounts } from './link-packets.js';
import { type CounterReading, type CounterSample, type Targets, validateTargets } from './targets.js';

/** Where binding.gyp (target clbprobe_bpf) puts the object for Ethernet frames, or with `l3` for IP frames. */
export function bpfObjectPath(l3 = false): string {
  return join(projectRoot(), 'build', 'Release', l3 ? 'clbprobe-l3.bpf.o' : 'clbprobe.bpf.o');
}

/** ARPHRD_* types whose frames start with a 14-byte Ethernet header. */
const ETHERNET_TYPES = new Set([1 /* ETHER */, 772 /* LOOPBACK */]);

/** Frames of this ARPHRD_* type start with the IP header (tun, WireGuard, IP-in-IP), so they need the L3 object. */
export const isL3LinkType = (type: number): boolean => !ETHERNET_TYPES.has(type);

export class EbpfCounter implements Counter {
  readonly backend = 'ebpf' as const;
  readonly maxVipsPerFamily = MAX_VIPS_PER_FAMILY;
  readonly description: string;
  private readonly fds: Record<string, number>;
  private readonly progFds: Record<string, number>;
  private readonly reader: CounterMapReader;
  /** Keeps the maps the agent writes equal to the targets; its counter slots last as long as this counter. */
  private readonly targetSync: TargetSync;
  private readonly slotReader: SlotMapReader;
  private readonly cpus: number;
  private closed = false;
  /** Why nothing is counted now (uplink deleted and not re-attached); undefined while attached. */
  stopped: string | undefined;
  /** The new ifindex a failed re-attach was logged for, so that a retry at every read logs once. */
  private failedOn: number | undefined;
  /** The program loaded reads frames that start with the IP header (isL3LinkType). */
  private readonly l3: boolean;

  private constructor(
    private readonly addon: BpfAddon,
    private readonly obj: BpfObject,
    private attachment: Attachment,
    private readonly link: LinkPackets,
    readonly ifname: string,
    private readonly netnsPath: string | undefined,
    private readonly log: Logger | undefined,
  ) {
    this.description = `eBPF (${attachment.mode}) on ${ifname}`;
    this.l3 = isL3LinkType(link.type);
    this.progFds = programFds(addon, obj);
    // The config array starts as zeros: no prefixes, so nothing is local until setTargets.
    const maps = [...TARGET_MAPS, MAP_COUNTERS, MAP_SLOTS, MAP_SLOTS_SEEN, MAP_STATS];
    this.fds = Object.fromEntries(maps.map((m) => [m, addon.bpfObjectMapFd(obj, m)]));
    this.cpus = addon.bpfPossibleCpus();
    this.reader = new CounterMapReader(addon, this.fds[MAP_COUNTERS]!, this.cpus);
    this.targetSync = new TargetSync(addon, this.fds);
    const { slots } = this.targetSync;
    this.slotReader = new SlotMapReader(addon, this.fds[MAP_SLOTS]!, this.fds[MAP_SLOTS_SEEN]!, this.cpus, slots);
  }

  /** Loads the program for the link type as seen in the interface's namespace, after cleaning cls_bpf leftovers. */
  static open(opts: CounterOptions): EbpfCounter {
    const what = `attaching the eBPF counters to ${opts.ifname}`;
    let link: LinkPackets;
    try {
      link = LinkPackets.open(opts.ifname, opts.netnsPath);
    } catch (e) {
      if (e instanceof NetlinkError && e.errno === ENODEV)
        throw new CaptureError(`${what}: interface ${opts.ifname}: No such device`, 'ENODEV', 'attach');
      throw captureError(e, 'attach', what);
    }
    const addon = bpfAddon();
    let obj: BpfObject | undefined;
    let counter: EbpfCounter;
    try {
      const path = bpfObjectPath(isL3LinkType(link.type));
      if (!existsSync(path)) {
        throw new CaptureError(`eBPF program not built (${path} missing); run: npm run build`, 'ENOENT', 'load');
      }
      const opened = step('load', `opening ${path}`, () => addon.bpfObjectOpen(path));
      obj = opened;
      step('load', 'loading the eBPF counter program', () => addon.bpfObjectLoad(opened));
      const target = { ifname: opts.ifname, netnsPath: opts.netnsPath };
      const attachment = step('attach', what, () => {
        removeTcLeftovers(addon, target, opts.logger);
        return attachPrograms(addon, programFds(addon, opened), target, opts.attach ?? 'auto', opts.logger);
      });
      counter = new EbpfCounter(addon, opened, attachment, link, opts.ifname, opts.netnsPath, opts.logger);
    } catch (e) {
      if (obj) addon.bpfObjectClose(obj);
      link.close();
      throw e;
    }
    opts.logger?.info(
      { ifname: opts.ifname, ifindex: link.ifindex, attach: counter.attachMode, l3: isL3LinkType(link.type) },
      'eBPF counters attached',
    );
    return counter;
  }

  get attachMode(): Attachment['mode'] {
    return this.attachment.mode;
  }

  /** fds of the loaded programs, for benchmarks (bpfProgInfo). */
  programFds(): { ingress: number; egress: number } {
    return { ingress: this.progFds[PROG_INGRESS]!, egress: this.progFds[PROG_EGRESS]! };
  }

  setTargets(targets: Targets): void {
    this.ensureOpen();
    validateTargets(targets);
    this.targetSync.sync(targets);
  }

  read(): CounterReading {
    this.ensureOpen();
    const seen = this.followUplink();
    const stat = (slot: number) => readPerCpuU64(this.addon, this.fds[MAP_STATS]!, this.cpus, slot);
    return {
      backend: 'ebpf',
      counters: mergeSamples(this.reader.read(), this.slotReader.read()),
      // The programs run on every packet, so counting them there would cost a map write per packet.
      seen,
      drops: { counterMapFull: stat(STAT_COUNTERS_FULL), captureBuffer: 0, interface: 0 },
    };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    try {
      // Gone since the last read: detaching by name would fail, or reach a new interface of that name.
      let gone = false;
      try {
        gone = this.stopped === undefined && this.link.read() === undefined;
      } catch {
        // cannot be told: still there
      }
      if (gone) this.attachment.release();
      this.attachment.detach();
    } finally {
      this.link.close();
      this.addon.bpfObjectClose(this.obj);
    }
  }

  /** The uplink's packets since open, after noticing (and following) an uplink deleted or re-created since. */
  private followUplink(): PacketCounts {
    const seen = this.link.read();
    if (seen) return seen;
    if (this.stopped === undefined) {
      this.attachment.release();
      this.stopped = this.stoppedText();
      const ifindex = this.link.ifindex;
      this.log?.error({ ifname: this.ifname, ifindex }, 'uplink deleted; the eBPF counters no longer count');
    }
    this.reattach();
    return this.link.read() ?? this.link.lastRead;
  }

  /** Why nothing is counted since the uplink followed was deleted, with why it was not re-attached (`why`). */
  private stoppedText(why?: string): string {
    const deleted = `eBPF counters on ${this.ifname} stopped: the interface was deleted (ifindex ${this.link.ifindex})`;
    return `${deleted}; ${why ? `${why}; ` : ''}packets are not counted since`;
  }

  /** Stops with `why` the new interface `now` was not attached to; logged once per new interface. */
  private reattachFailed(now: LinkNow, why: string, fields: object, message: string): void {
    this.stopped = this.stoppedText(why);
    if (this.failedOn !== now.ifindex)
      this.log?.error({ ifname: this.ifname, ifindex: now.ifindex, ...fields }, message);
    this.failedOn = now.ifindex;
  }

  /** Attaches the programs to the interface that has the uplink's name now, if one has. */
  private reattach(): void {
    const now = this.link.now();
    if (!now) return;
    const newLink = `the new ${this.ifname} (ifindex ${now.ifindex})`;
    if (isL3LinkType(now.type) !== this.l3) {
      // The loaded program would read its headers at the wrong offset and count nothing.
      const header = this.l3 ? 'Ethernet' : 'no Ethernet header';
      this.reattachFailed(
        now,
        `${newLink} is of another link type (ARPHRD ${now.type}: ${header}), which the program loaded does not ` +
          'read; restart the agent to count on it',
        { type: now.type },
        'eBPF counters: the re-created uplink is of another link type; not re-attached',
      );
      return;
    }
    const target = { ifname: this.ifname, netnsPath: this.netnsPath };
    let attachment: Attachment;
    try {
      attachment = attachPrograms(this.addon, this.progFds, target, this.attachment.mode, this.log);
    } catch (e) {
      const err = errText(e);
      this.reattachFailed(
        now,
        `attaching to ${newLink} failed: ${err}`,
        { err },
        'eBPF counters: re-attaching to the re-created uplink failed; retrying at each read',
      );
      return;
    }
    // Attached by name: if the name moved on meanwhile, take the programs off and let the next read start over.
    if (this.link.now()?.ifindex !== now.ifindex) {
      try {
        attachment.detach();
      } catch {
        attachment.release(); // no interface has the name: the hooks went with the one attached to
      }
      return;
    }
    const was = this.link.ifindex;
    this.attachment = attachment;
    this.link.follow(now);
    this.stopped = this.failedOn = undefined;
    this.log?.warn(
      { ifname: this.ifname, ifindex: now.ifindex, was },
      'eBPF counters re-attached to the re-created uplink; packets between its deletion and now were not counted',
    );
  }

  private ensureOpen(): void {
    if (this.closed) throw new Error('eBPF counter already closed');
  }
}

/** The programs' fds keyed by program name, as attachPrograms takes them. */
function programFds(addon: BpfAddon, obj: BpfObject): Record<string, number> {
  return Object.fromEntries([PROG_INGRESS, PROG_EGRESS].map((p) => [p, addon.bpfObjectProgFd(obj, p)]));
}

/** Per-CPU values occupy one 8-byte-aligned slot per possible CPU. */
export function perCpuStride(valueSize: number): number {
  return Math.ceil(valueSize / 8) * 8;
}

/** Counter values read with batch lookups, or one lookup per key once the kernel refused a batch lookup. */
abstract class PerCpuCounterReader {
  protected readonly token = Buffer.alloc(8);
  protected readonly status = new Int32Array(2);
  protected readonly stride = perCpuStride(COUNTER_VALUE_SIZE);
  /** Set once the kernel refused a batch lookup (kernels before 5.6 have none for hashes, 5.10 for per-CPU arrays). */
  private batchless = false;

  constructor(
    protected readonly addon: BpfAddon,
    protected readonly fd: number,
    protected readonly cpus: number,
  ) {}

  protected readBatchesOrByKey(batches: () => CounterSample[], byKey: () => CounterSample[]): CounterSample[] {
    if (!this.batchless) {
      try {
        return batches();
      } catch (e) {
        if (!kernelLacksIt(e)) throw e;
        this.batchless = true;
      }
    }
    return byKey();
  }

  /** Sum over CPUs of the u64 at `field` of the i-th per-CPU value in `values` (exact below 2^53). */
  protected sum(values: Buffer, i: number, field: number): number {
    let total = 0;
    const base = i * this.cpus * this.stride + field;
    for (let c = 0; c < this.cpus; c++) {
      const off = base + c * this.stride;
      total += values.readUInt32LE(off) + values.readUInt32LE(off + 4) * 0x1_0000_0000;
    }
    return total;
  }
}

type CounterKey = ReturnType<typeof decodeCounterKey>;

/** Field by field, because spreading the decoded key makes a read several times slower. */
const sampleOf = (key: CounterKey, packets: number, bytes: number): CounterSample => ({
  target: key.target,
  port: key.port,
  proto: key.proto,
  kind: key.kind,
  direction: key.direction,
  packets,
  bytes,
});

/** Sums the per-CPU counters hash with batch lookups whose buffers grow only while batches come back full. */
export class CounterMapReader extends PerCpuCounterReader {
  private keys: Buffer;
  private values: Buffer;
  batchSize: number;
  /** Decoded keys by raw bytes: keys stay the same from one read to the next. */
  private decoded = new Map<string, CounterKey>();

  constructor(
    addon: BpfAddon,
    fd: number,
    cpus: number,
    private readonly batch = 4096,
    first = 128,
  ) {
    super(addon, fd, cpus);
    this.batchSize = Math.min(first, batch);
    this.keys = Buffer.alloc(this.batchSize * COUNTER_KEY_SIZE);
    this.values = Buffer.alloc(this.batchSize * cpus * this.stride);
  }

  read(): CounterSample[] {
    return this.readBatchesOrByKey(
      () => this.readBatches(),
      () => this.readByKey(),
    );
  }

  /** One lookup per key, walking the keys; for kernels without batch lookups of hashes (before 5.6). */
  private readByKey(): CounterSample[] {
    const out: CounterSample[] = [];
    const seen = new Map<string, CounterKey>();
    const key = Buffer.alloc(COUNTER_KEY_SIZE);
    const next = Buffer.alloc(COUNTER_KEY_SIZE);
    const value = Buffer.alloc(this.cpus * this.stride);
    for (
      let more = this.addon.bpfMapGetNextKey(this.fd, null, next);
      more;
      more = this.addon.bpfMapGetNextKey(this.fd, key, next)
    ) {
      next.copy(key);
      // A key deleted between the walk and the lookup has nothing left to count.
      if (this.addon.bpfMapLookup(this.fd, key, value)) this.sample(out, seen, key, value, 0);
    }
    this.decoded = seen;
    return out;
  }

  private readBatches(): CounterSample[] {
    const out: CounterSample[] = [];
    const seen = new Map<string, CounterKey>();
    for (let first = true; ; first = false) {
      this.addon.bpfMapLookupBatch(this.fd, this.keys, this.values, this.token, first, this.status, this.batchSize);
      const n = this.status[0]!;
      for (let i = 0; i < n; i++) this.sample(out, seen, this.keys, this.values, i);
      if (this.status[1] || n === 0) break;
      // More to come after a full batch: larger batches from now on (the token keeps the place).
      if (n >= this.batchSize && this.batchSize < this.batch) {
        this.batchSize = Math.min(this.batch, this.batchSize * 4);
        this.keys = Buffer.alloc(this.batchSize * COUNTER_KEY_SIZE);
        this.values = Buffer.alloc(this.batchSize * this.cpus * this.stride);
      }
    }
    this.decoded = seen;
    return out;
  }

  /** Adds the i-th key of `keys` with its value in `values` to `out`, and its decoded key to `seen`. */
  private sample(out: CounterSample[], seen: Map<string, CounterKey>, keys: Buffer, values: Buffer, i: number): void {
    const raw = keys.toString('latin1', i * COUNTER_KEY_SIZE, (i + 1) * COUNTER_KEY_SIZE);
    const key = this.decoded.get(raw) ?? decodeCounterKey(keys, i * COUNTER_KEY_SIZE);
    seen.set(raw, key);
    out.push(sampleOf(key, this.sum(values, i, CTR_VAL_PACKETS), this.sum(values, i, CTR_VAL_BYTES)));
  }
}

/** Reads only the slots marked in `slots_seen`, since the kernel copies per-CPU values one element at a time. */
export class SlotMapReader extends PerCpuCounterReader {
  private keys = Buffer.alloc(0);
  private values = Buffer.alloc(0);
  private readonly decoded: CounterKey[] = [];
  private readonly seen = Buffer.alloc(SLOTS_SEEN_VALUE_SIZE);
  private readonly key = Buffer.alloc(4);
  private readonly one: Buffer;

  constructor(
    addon: BpfAddon,
    fd: number,
    private readonly seenFd: number,
    cpus: number,
    private readonly slots: SlotAllocator,
    private readonly batch = 4096,
  ) {
    super(addon, fd, cpus);
    this.one = Buffer.alloc(cpus * this.stride);
  }

  read(): CounterSample[] {
    const used = this.slots.used;
    if (used <= 1) return [];
    // A slot not marked is zero on every CPU: the mark is set after the counts, and never cleared.
    if (!this.addon.bpfMapLookup(this.seenFd, this.key.fill(0), this.seen)) return this.readAll(used);
    const marked: number[] = [];
    for (let at = this.seen.indexOf(1, 1); at >= 0 && at < used; at = this.seen.indexOf(1, at + 1)) marked.push(at);
    if (marked.length * 4 > used) return this.readAll(used);
    return this.readEach(marked);
  }

  /** Every slot handed out: with batch lookups, or one lookup per slot where the kernel has none for per-CPU arrays. */
  private readAll(used: number): CounterSample[] {
    return this.readBatchesOrByKey(
      () => this.readBatches(used),
      () => this.readEach(Array.from({ length: used - 1 }, (_, i) => i + 1)),
    );
  }

  private readEach(slots: number[]): CounterSample[] {
    const out: CounterSample[] = [];
    for (const slot of slots) {
      this.key.writeUInt32LE(slot, 0);
      if (this.addon.bpfMapLookup(this.fd, this.key, this.one)) this.sample(out, slot, this.one, 0);
    }
    return out;
  }

  private readBatches(used: number): CounterSample[] {
    const size = Math.min(used, this.batch);
    if (this.keys.length < size * 4) {
      this.keys = Buffer.alloc(size * 4);
      this.values = Buffer.alloc(size * this.cpus * this.stride);
    }
    const out: CounterSample[] = [];
    for (let done = 0, first = true; done < used; first = false) {
      const max = Math.min(size, used - done);
      this.addon.bpfMapLookupBatch(this.fd, this.keys, this.values, this.token, first, this.status, max);
      const n = this.status[0]!;
      for (let i = 0; i < n; i++) {
        const slot = this.keys.readUInt32LE(i * 4);
        if (slot !== 0 && slot < used) this.sample(out, slot, this.values, i);
      }
      done += n;
      if (this.status[1] || n === 0) break;
    }
    return out;
  }

  private sample(out: CounterSample[], slot: number, values: Buffer, i: number): void {
    const packets = this.sum(values, i, CTR_VAL_PACKETS);
    if (packets === 0) return;
    const key = this.decoded[slot] ?? decodeCounterKey(this.slots.keyOf(slot), 0);
    this.decoded[slot] = key;
    out.push(sampleOf(key, packets, this.sum(values, i, CTR_VAL_BYTES)));
  }
}

/** One sample per key: a NodePort key may be counted in both the hash and, once it gets a slot, its slot. */
export function mergeSamples(a: CounterSample[], b: CounterSample[]): CounterSample[] {
  if (b.length === 0) return a;
  const byKey = new Map<string, CounterSample>();
  for (const s of [...a, ...b]) {
    const k = `${s.target}|${s.port}|${s.proto}|${s.kind}|${s.direction}`;
    const had = byKey.get(k);
    if (had) {
      had.packets += s.packets;
      had.bytes += s.bytes;
    } else byKey.set(k, { ...s });
  }
  return [...byKey.values()];
}
