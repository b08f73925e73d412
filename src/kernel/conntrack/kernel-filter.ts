// The conntrack prefilter's test run by the kernel on the event socket (ctevents.bpf.c via SO_ATTACH_BPF), its key
// map kept equal to PrefilterKeys; when it cannot load, the caller filters in user space only.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { projectRoot } from '../../native/addon.js';
import { type BpfAddon, type BpfObject, bpfAddon, readPerCpuU64 } from '../../native/bpf.js';
import type { NetlinkSocket } from '../netlink/socket.js';
import type { PrefilterKeys } from './prefilter.js';

// Names, sizes and offsets of ctevents.bpf.c's maps; test/unit/conntrack/kernel-filter-btf.test.ts
// checks each against the compiled object's BTF.
export const CT_FILTER_PROGRAM = 'ct_event_filter';
export const CT_MAP_KEYS = 'ct_keys';
export const CT_MAP_STATS = 'ct_stats';
/** The key map's max_entries (ctevents.bpf.c MAX_KEYS). */
export const KERNEL_FILTER_MAX_KEYS = 262144;
/** struct ct_key: address and port in network order, protocol, kind; the value one byte. */
export const CT_KEY_SIZE = 8;
export const CT_KEY_ADDR = 0;
export const CT_KEY_PORT = 4;
export const CT_KEY_PROTO = 6;
export const CT_KEY_KIND = 7;
export const CT_VALUE_SIZE = 1;
/** Slots of ct_stats (enum stat), u64 per CPU. */
export const CT_STAT_PASSED = 0;
export const CT_STAT_DROPPED = 1;
export const CT_STAT_SLOTS = 2;

/** Key kinds (ctevents.bpf.c enum kind). */
export const CT_KIND = { proto: 1, vip: 2, nodeIp: 3, nodePort: 4, endpoint: 5 } as const;

const BPF_ANY = 0;
const PRESENT = Buffer.alloc(CT_VALUE_SIZE, 1);

export function ctEventsObjectPath(): string {
  return join(projectRoot(), 'build', 'Release', 'ctevents.bpf.o');
}

const NO_KEYS: PrefilterKeys = {
  protos: new Set(),
  nodeIps: new Set(),
  vips: new Map(),
  endpoints: new Map(),
  nodePorts: new Set(),
};

/** Keys in the kernel's map for a set of targets. */
function kernelKeyCount(keys: PrefilterKeys): number {
  let n = keys.protos.size + keys.nodeIps.size + keys.nodePorts.size;
  for (const byPort of [keys.vips, keys.endpoints]) for (const ips of byPort.values()) n += ips.size;
  return n;
}

export interface KernelFilterStats {
  /** Events the kernel handed to the socket / dropped, since the program was loaded. */
  passed: number;
  dropped: number;
}

export class KernelEventFilter {
  private readonly mapFd: number;
  private readonly statsFd: number;
  private readonly cpus: number;
  /** What the key map holds. */
  private applied: PrefilterKeys = NO_KEYS;
  private attachedTo?: NetlinkSocket;
  /** One key, rewritten for each map call (8 bytes: addr, port, proto, kind). */
  private readonly key = Buffer.alloc(CT_KEY_SIZE);
  private closed = false;

  private constructor(
    private readonly addon: BpfAddon,
    private readonly obj: BpfObject,
  ) {
    this.mapFd = addon.bpfObjectMapFd(obj, CT_MAP_KEYS);
    this.statsFd = addon.bpfObjectMapFd(obj, CT_MAP_STATS);
    this.cpus = addon.bpfPossibleCpus();
  }

  /** Loads the program; throws an Error that says why it cannot run here. */
  static open(): KernelEventFilter {
    const path = ctEventsObjectPath();
    if (!existsSync(path)) throw new Error(`${path} missing; run: npm run build`);
    const addon = bpfAddon();
    const obj = addon.bpfObjectOpen(path);
    try {
      addon.bpfObjectLoad(obj);
      return new KernelEventFilter(addon, obj);
    } catch (e) {
      addon.bpfObjectClose(obj);
      throw e;
    }
  }

  /**
   * Deletes before inserting so the map never outgrows the larger set, and leaves shared keys untouched; on a throw
   * the map holds a mix and the caller must detach, since the filter would drop events of missing targets.
   */
  sync(next: PrefilterKeys): void {
    this.ensureOpen();
    const size = kernelKeyCount(next);
    if (size > KERNEL_FILTER_MAX_KEYS)
      throw new Error(`${size} targets exceed the kernel filter's ${KERNEL_FILTER_MAX_KEYS} keys`);
    const prev = this.applied;
    this.eachKeyOnlyIn(prev, next, () => this.addon.bpfMapDelete(this.mapFd, this.key));
    this.eachKeyOnlyIn(next, prev, () => this.addon.bpfMapUpdate(this.mapFd, this.key, PRESENT, BPF_ANY));
    this.applied = next;
  }

  /** Puts each key of `keys` that `other` lacks into this.key and calls apply(). */
  private eachKeyOnlyIn(keys: PrefilterKeys, other: PrefilterKeys, apply: () => void): void {
    for (const p of keys.protos) {
      if (other.protos.has(p)) continue;
      this.setKey(0, 0, p, CT_KIND.proto);
      apply();
    }
    for (const ip of keys.nodeIps) {
      if (other.nodeIps.has(ip)) continue;
      this.setKey(ip, 0, 0, CT_KIND.nodeIp);
      apply();
    }
    for (const at of keys.nodePorts) {
      if (other.nodePorts.has(at)) continue;
      this.setKey(0, at % 65536, Math.floor(at / 65536), CT_KIND.nodePort);
      apply();
    }
    for (const [kind, aByPort, bByPort] of [
      [CT_KIND.vip, keys.vips, other.vips],
      [CT_KIND.endpoint, keys.endpoints, other.endpoints],
    ] as const) {
      for (const [at, ips] of aByPort) {
        const inB = bByPort.get(at);
        for (const ip of ips) {
          if (inB?.has(ip)) continue;
          this.setKey(ip, at % 65536, Math.floor(at / 65536), kind);
          apply();
        }
      }
    }
  }

  /** Attaches to a socket (after the first sync: an empty map would drop every IPv4 event). */
  attach(socket: NetlinkSocket): void {
    this.ensureOpen();
    socket.attachBpf(this.addon.bpfObjectProgFd(this.obj, CT_FILTER_PROGRAM));
    this.attachedTo = socket;
  }

  /** Takes the filter off the socket: every event reaches user space again. */
  detach(): void {
    const socket = this.attachedTo;
    this.attachedTo = undefined;
    socket?.detachBpf();
  }

  stats(): KernelFilterStats {
    this.ensureOpen();
    return {
      passed: readPerCpuU64(this.addon, this.statsFd, this.cpus, CT_STAT_PASSED),
      dropped: readPerCpuU64(this.addon, this.statsFd, this.cpus, CT_STAT_DROPPED),
    };
  }

  /** Frees the program and maps; an attached socket keeps the program until it is closed. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.addon.bpfObjectClose(this.obj);
  }

  private setKey(ip: number, port: number, proto: number, kind: number): void {
    const k = this.key;
    k.writeInt32BE(ip, CT_KEY_ADDR);
    k.writeUInt16BE(port, CT_KEY_PORT);
    k[CT_KEY_PROTO] = proto;
    k[CT_KEY_KIND] = kind;
  }

  private ensureOpen(): void {
    if (this.closed) throw new Error('kernel conntrack filter already closed');
  }
}
