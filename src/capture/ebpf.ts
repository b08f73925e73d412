// The eBPF counter backend: loads clbprobe.bpf.c's object, attaches it to the uplink (attach.ts), keeps its maps
// equal to the target sets, reads the per-CPU counters, and re-attaches to a re-created uplink of the same link kind.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { NetlinkError } from '../kernel/netlink/socket.js';
import type { Logger } from '../log.js';
import { projectRoot } from '../native/addon.js';
import { type BpfAddon, type BpfObject, bpfAddon, readPerCpuU64 } from '../native/bpf.js';
import { type Attachment, attachPrograms, removeTcLeftovers } from './attach.js';
import {
  MAP_COUNTERS,
  MAP_SLOTS,
  MAP_SLOTS_SEEN,
  MAP_STATS,
  MAX_VIPS_PER_FAMILY,
  PROG_EGRESS,
  PROG_INGRESS,
  STAT_COUNTERS_FULL,
} from './bpf-layout.js';
import type { Counter, CounterOptions } from './counter-types.js';
import { CounterMapReader, mergeSamples, SlotMapReader, TARGET_MAPS } from './ebpf-maps.js';
import { TargetSync } from './ebpf-sync.js';
import { CaptureError, captureError } from './errors.js';
import { type LinkNow, LinkPackets, type PacketCounts } from './link-packets.js';
import { type CounterReading, type Targets, validateTargets } from './targets.js';

/** Where binding.gyp (target clbprobe_bpf) puts the object for Ethernet frames, or with `l3` for IP frames. */
export function bpfObjectPath(l3 = false): string {
  return join(projectRoot(), 'build', 'Release', l3 ? 'clbprobe-l3.bpf.o' : 'clbprobe.bpf.o');
}

const ENODEV = 19;

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
  /** Why nothing is counted now (the uplink went away); undefined while attached. */
  private stopReason: string | undefined;
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
    let counter: EbpfCounter;
    try {
      const path = bpfObjectPath(isL3LinkType(link.type));
      if (!existsSync(path)) {
        throw new CaptureError(`eBPF program not built (${path} missing); run: npm run build`, 'ENOENT', 'load');
      }
      const addon = bpfAddon();
      let obj: BpfObject;
      try {
        obj = addon.bpfObjectOpen(path);
      } catch (e) {
        throw captureError(e, 'load', `opening ${path}`);
      }
      let attachment: Attachment;
      try {
        addon.bpfObjectLoad(obj);
      } catch (e) {
        addon.bpfObjectClose(obj);
        throw captureError(e, 'load', 'loading the eBPF counter program');
      }
      try {
        const target = { ifname: opts.ifname, netnsPath: opts.netnsPath };
        removeTcLeftovers(addon, target, opts.logger);
        attachment = attachPrograms(addon, programFds(addon, obj), target, opts.attach ?? 'auto', opts.logger);
      } catch (e) {
        addon.bpfObjectClose(obj);
        throw captureError(e, 'attach', what);
      }
      counter = new EbpfCounter(addon, obj, attachment, link, opts.ifname, opts.netnsPath, opts.logger);
    } catch (e) {
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

  /** Why nothing is counted now (uplink deleted and not re-attached); the counts read so far are kept. */
  get stopped(): string | undefined {
    return this.stopReason;
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
        gone = this.stopReason === undefined && this.link.read() === undefined;
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
    if (this.stopReason === undefined) {
      this.attachment.release();
      this.stopReason = this.stoppedText();
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
    this.stopReason = this.stoppedText(why);
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
      const err = (e as Error).message;
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
    this.stopReason = this.failedOn = undefined;
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
