// The eBPF counter backend: loads native/bpf/clbprobe.bpf.c's object, attaches
// it to the uplink (see attach.ts), keeps its maps equal to the target sets
// and reads the per-CPU counters.
//
// The programs are attached to an ifindex: a deleted uplink takes them with it
// and a re-created one (same name, new ifindex: a driver reload) starts without
// them, while the maps, read by fd, go on answering the old counts. Each read
// (every scrape) checks that the name still names the ifindex attached to; if
// not, the counters are `stopped` with the reason, and as soon as an interface
// has the name again the same programs are attached to it: the counts go on
// from where they were, without what passed while nothing was attached.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { projectRoot } from '../native/addon.js';
import { bpfAddon, readPerCpuU64, type BpfAddon, type BpfObject } from '../native/bpf.js';
import { attachPrograms, removeTcLeftovers, type Attachment } from './attach.js';
import { MAP_COUNTERS, MAX_VIPS_PER_FAMILY, MAP_SLOTS, MAP_SLOTS_SEEN, MAP_STATS, PROG_EGRESS, PROG_INGRESS, STAT_COUNTERS_FULL } from './bpf-layout.js';
import type { Logger } from '../log.js';
import type { Counter, CounterOptions } from './counter-types.js';
import { CounterMapReader, mergeSamples, SlotMapReader, TARGET_MAPS } from './ebpf-maps.js';
import { TargetSync } from './ebpf-sync.js';
import { LinkPackets, type PacketCounts } from './link-packets.js';
import { captureError, CaptureError } from './errors.js';
import { validateTargets, type CounterReading, type Targets } from './targets.js';

/**
 * Where the build (binding.gyp, target clbprobe_bpf) puts the compiled program: for interfaces
 * whose frames start with an Ethernet header, or (l3) with the IP header.
 */
export function bpfObjectPath(l3 = false): string {
  return join(projectRoot(), 'build', 'Release', l3 ? 'clbprobe-l3.bpf.o' : 'clbprobe.bpf.o');
}

/** ARPHRD_* types whose frames start with a 14-byte Ethernet header. */
const ETHERNET_TYPES = new Set([1 /* ETHER */, 772 /* LOOPBACK */]);

/**
 * Bytes before the IP header on this interface. Read from sysfs for our own
 * namespace; interfaces in another namespace (tests) are taken as Ethernet.
 */
function l2HeaderLength(ifname: string, netnsPath?: string): number {
  if (netnsPath) return 14;
  try {
    const type = Number(readFileSync(`/sys/class/net/${ifname}/type`, 'utf8').trim());
    return ETHERNET_TYPES.has(type) ? 14 : 0;
  } catch {
    return 14;
  }
}

export class EbpfCounter implements Counter {
  readonly backend = 'ebpf' as const;
  readonly maxVipsPerFamily = MAX_VIPS_PER_FAMILY;
  readonly description: string;
  private readonly fds: Record<string, number>;
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
    // The config array starts as zeros: no prefixes, so nothing is local until setTargets.
    this.fds = Object.fromEntries(
      [...TARGET_MAPS, MAP_COUNTERS, MAP_SLOTS, MAP_SLOTS_SEEN, MAP_STATS].map((m) => [m, addon.bpfObjectMapFd(obj, m)]),
    );
    this.cpus = addon.bpfPossibleCpus();
    this.reader = new CounterMapReader(addon, this.fds[MAP_COUNTERS]!, this.cpus);
    this.targetSync = new TargetSync(addon, this.fds);
    this.slotReader = new SlotMapReader(addon, this.fds[MAP_SLOTS]!, this.fds[MAP_SLOTS_SEEN]!, this.cpus, this.targetSync.slots);
  }

  /** Loads and attaches; cleans a crashed run's cls_bpf filters first. */
  static open(opts: CounterOptions): EbpfCounter {
    const path = bpfObjectPath(l2HeaderLength(opts.ifname, opts.netnsPath) === 0);
    if (!existsSync(path)) {
      throw new CaptureError(`eBPF program not built (${path} missing); run: npm run build`, 'ENOENT', 'load');
    }
    const addon = bpfAddon();
    const target = { ifname: opts.ifname, netnsPath: opts.netnsPath };
    let obj: BpfObject;
    try {
      obj = addon.bpfObjectOpen(path);
    } catch (e) {
      throw captureError(e, 'load', `opening ${path}`);
    }
    try {
      addon.bpfObjectLoad(obj);
    } catch (e) {
      addon.bpfObjectClose(obj);
      throw captureError(e, 'load', 'loading the eBPF counter program');
    }
    let attachment: Attachment;
    try {
      removeTcLeftovers(addon, target, opts.logger);
      const progs = {
        [PROG_INGRESS]: addon.bpfObjectProgFd(obj, PROG_INGRESS),
        [PROG_EGRESS]: addon.bpfObjectProgFd(obj, PROG_EGRESS),
      };
      attachment = attachPrograms(addon, progs, target, opts.attach ?? 'auto', opts.logger);
    } catch (e) {
      addon.bpfObjectClose(obj);
      throw captureError(e, 'attach', `attaching the eBPF counters to ${opts.ifname}`);
    }
    let link: LinkPackets;
    try {
      link = LinkPackets.open(opts.ifname, opts.netnsPath);
    } catch (e) {
      attachment.detach();
      addon.bpfObjectClose(obj);
      throw captureError(e, 'attach', `reading the packet counts of ${opts.ifname}`);
    }
    const counter = new EbpfCounter(addon, obj, attachment, link, opts.ifname, opts.netnsPath, opts.logger);
    opts.logger?.info({ ifname: opts.ifname, ifindex: link.ifindex, attach: attachment.mode }, 'eBPF counters attached');
    return counter;
  }

  get attachMode(): Attachment['mode'] {
    return this.attachment.mode;
  }

  /** fds of the loaded programs, for benchmarks (bpfProgInfo). */
  programFds(): { ingress: number; egress: number } {
    return {
      ingress: this.addon.bpfObjectProgFd(this.obj, PROG_INGRESS),
      egress: this.addon.bpfObjectProgFd(this.obj, PROG_EGRESS),
    };
  }

  /** The programs' fds keyed by program name, as attachPrograms takes them. */
  private progFdsByName(): Record<string, number> {
    const { ingress, egress } = this.programFds();
    return { [PROG_INGRESS]: ingress, [PROG_EGRESS]: egress };
  }

  setTargets(targets: Targets): void {
    this.ensureOpen();
    validateTargets(targets);
    this.targetSync.sync(targets);
  }

  /**
   * Why the counters count nothing now: the uplink was deleted (and re-attaching to one re-created
   * under its name failed). Cleared when the programs are attached again. The counts read keep
   * what was counted until then.
   */
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
      // The programs run on every packet of the interface; counting them there
      // would cost a map write per packet, so the interface's own counts stand in.
      seen,
      drops: { counterMapFull: stat(STAT_COUNTERS_FULL), captureBuffer: 0, interface: 0 },
    };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    try {
      // Gone since the last read: detaching by name would fail, or reach a new interface of that name.
      if (this.stopReason === undefined && this.uplinkGone()) this.attachment.release();
      this.attachment.detach();
    } finally {
      this.link.close();
      this.addon.bpfObjectClose(this.obj);
    }
  }

  /** The uplink's packets since open, after noticing (and following) an uplink deleted or re-created since the last read. */
  private followUplink(): PacketCounts {
    const seen = this.link.read();
    if (seen) return seen;
    if (this.stopReason === undefined) {
      const was = this.link.ifindex;
      this.attachment.release();
      this.stopReason = `eBPF counters on ${this.ifname} stopped: the interface was deleted (ifindex ${was}); packets are not counted since`;
      this.log?.error({ ifname: this.ifname, ifindex: was }, 'uplink deleted; the eBPF counters no longer count');
    }
    this.reattach();
    return this.link.read() ?? this.link.lastRead;
  }

  /** Attaches the programs to the interface that has the uplink's name now, if one has. */
  private reattach(): void {
    const now = this.link.now();
    if (!now) return;
    const was = this.link.ifindex;
    const target = { ifname: this.ifname, netnsPath: this.netnsPath };
    let attachment: Attachment;
    try {
      attachment = attachPrograms(this.addon, this.progFdsByName(), target, this.attachment.mode, this.log);
    } catch (e) {
      this.stopReason = `eBPF counters on ${this.ifname} stopped: the interface was deleted (ifindex ${was}); attaching to the new ${this.ifname} (ifindex ${now.ifindex}) failed: ${(e as Error).message}; packets are not counted since`;
      if (this.failedOn !== now.ifindex) this.log?.error({ ifname: this.ifname, ifindex: now.ifindex, err: (e as Error).message }, 'eBPF counters: re-attaching to the re-created uplink failed; retrying at each read');
      this.failedOn = now.ifindex;
      return;
    }
    // Attached by name: if the name moved on again meanwhile, the programs are on that newer
    // interface, which the next read finds unfollowed; take them off and start over then.
    if (this.link.now()?.ifindex !== now.ifindex) {
      try {
        attachment.detach();
      } catch {
        attachment.release(); // no interface has the name: the hooks went with the one attached to
      }
      return;
    }
    this.attachment = attachment;
    this.link.follow(now);
    this.stopReason = this.failedOn = undefined;
    this.log?.warn(
      { ifname: this.ifname, ifindex: now.ifindex, was },
      'eBPF counters re-attached to the re-created uplink; packets between its deletion and now were not counted',
    );
  }

  /** The uplink's name no longer names the interface attached to; false also when that cannot be told. */
  private uplinkGone(): boolean {
    try {
      return this.link.read() === undefined;
    } catch {
      return false;
    }
  }

  private ensureOpen(): void {
    if (this.closed) throw new Error('eBPF counter already closed');
  }
}
