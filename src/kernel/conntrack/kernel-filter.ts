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

/** Calls fn with each key the kernel's map holds for a set of targets: address, protoPort (prefilter.ts), kind. */
function eachKey(keys: PrefilterKeys, fn: (ip: number, at: number, kind: number) => void): void {
  for (const proto of keys.protos) fn(0, proto * 65536, CT_KIND.proto);
  for (const ip of keys.nodeIps) fn(ip, 0, CT_KIND.nodeIp);
  for (const at of keys.nodePorts) fn(0, at, CT_KIND.nodePort);
  for (const [at, ips] of keys.vips) for (const ip of ips) fn(ip, at, CT_KIND.vip);
  for (const [at, ips] of keys.endpoints) for (const ip of ips) fn(ip, at, CT_KIND.endpoint);
}

/** Whether a set of targets has the key eachKey gives as (ip, at, kind). */
function holds(keys: PrefilterKeys, ip: number, at: number, kind: number): boolean {
  if (kind === CT_KIND.proto) return keys.protos.has(at / 65536);
  if (kind === CT_KIND.nodeIp) return keys.nodeIps.has(ip);
  if (kind === CT_KIND.nodePort) return keys.nodePorts.has(at);
  return (kind === CT_KIND.vip ? keys.vips : keys.endpoints).get(at)?.has(ip) === true;
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
    let size = next.protos.size + next.nodeIps.size + next.nodePorts.size;
    for (const ips of [...next.vips.values(), ...next.endpoints.values()]) size += ips.size;
    if (size > KERNEL_FILTER_MAX_KEYS)
      throw new Error(`${size} targets exceed the kernel filter's ${KERNEL_FILTER_MAX_KEYS} keys`);
    const prev = this.applied;
    eachKey(prev, (ip, at, kind) => {
      if (!holds(next, ip, at, kind)) this.addon.bpfMapDelete(this.mapFd, this.keyOf(ip, at, kind));
    });
    eachKey(next, (ip, at, kind) => {
      if (!holds(prev, ip, at, kind)) this.addon.bpfMapUpdate(this.mapFd, this.keyOf(ip, at, kind), PRESENT, BPF_ANY);
    });
    this.applied = next;
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

  /** this.key rewritten for one key as eachKey gives it. */
  private keyOf(ip: number, at: number, kind: number): Buffer {
    const k = this.key;
    k.writeInt32BE(ip, CT_KEY_ADDR);
    k.writeUInt16BE(at % 65536, CT_KEY_PORT);
    k[CT_KEY_PROTO] = Math.floor(at / 65536);
    k[CT_KEY_KIND] = kind;
    return k;
  }

  private ensureOpen(): void {
    if (this.closed) throw new Error('kernel conntrack filter already closed');
  }
}
