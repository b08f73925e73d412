// Bindings of native/bpf.c: libbpf object loading, TCX and cls_bpf attach, map syscalls; policy is in the callers.
import { loadAddon } from './addon.js';

/** A libbpf object (ELF file opened, maybe loaded). */
export type BpfObject = { readonly __bpfObject: unique symbol };
export interface BpfProgInfo {
  id: number;
  name: string;
  /** Cumulative; only advance while kernel.bpf_stats_enabled = 1. */
  runTimeNs: bigint;
  runCount: bigint;
}

export interface BpfAddon {
  bpfObjectOpen(path: string): BpfObject;
  bpfObjectLoad(obj: BpfObject): void;
  bpfObjectMapFd(obj: BpfObject, name: string): number;
  bpfObjectProgFd(obj: BpfObject, name: string): number;
  bpfObjectClose(obj: BpfObject): void;
  bpfTcxAttach(progFd: number, ifname: string, egress: boolean, flags: number, netnsPath?: string): number;
  bpfTcxQuery(ifname: string, egress: boolean, netnsPath?: string): number[];
  bpfLinkDetach(linkFd: number): void;
  bpfTcAttach(
    ifname: string,
    egress: boolean,
    handle: number,
    priority: number,
    progFd: number,
    netnsPath?: string,
  ): void;
  /** Program id of the cls_bpf filter at (handle, priority), 0 when there is none. */
  bpfTcQuery(ifname: string, egress: boolean, handle: number, priority: number, netnsPath?: string): number;
  /** False when there was no such filter. */
  bpfTcDetach(ifname: string, egress: boolean, handle: number, priority: number, netnsPath?: string): boolean;
  bpfProgInfo(progFd: number): BpfProgInfo;
  bpfProgInfoById(id: number): BpfProgInfo | null;
  bpfMapUpdate(fd: number, key: Uint8Array, value: Uint8Array, flags: number): void;
  bpfMapDelete(fd: number, key: Uint8Array): boolean;
  bpfMapLookup(fd: number, key: Uint8Array, value: Uint8Array): boolean;
  /** status[0] = entries read, status[1] = 1 when the walk is complete. */
  bpfMapLookupBatch(
    fd: number,
    keys: Uint8Array,
    values: Uint8Array,
    token: Uint8Array,
    first: boolean,
    status: Int32Array,
    maxCount: number,
  ): void;
  /** Writes the key after `key` (the first key with null) into `next`; false at the end of the map. */
  bpfMapGetNextKey(fd: number, key: Uint8Array | null, next: Uint8Array): boolean;
  bpfPossibleCpus(): number;
}

export function bpfAddon(): BpfAddon {
  return loadAddon() as BpfAddon;
}

/** The sum over CPUs of slot `slot` of a per-CPU array map of u64. */
export function readPerCpuU64(addon: BpfAddon, fd: number, cpus: number, slot: number): number {
  const key = Buffer.alloc(4);
  key.writeUInt32LE(slot >>> 0);
  const value = Buffer.alloc(cpus * 8);
  if (!addon.bpfMapLookup(fd, key, value)) return 0;
  let sum = 0n;
  for (let c = 0; c < cpus; c++) sum += value.readBigUInt64LE(c * 8);
  return Number(sum);
}
