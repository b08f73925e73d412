// Types of the addon's eBPF and pcap primitives (native/bpf.c, native/pcap.c).
// Every function is a thin syscall/libbpf/libpcap wrapper; all policy is in
// the other files of this directory.
import { native } from '../native.js';

/** A libbpf object (ELF file opened, maybe loaded). */
export type BpfObject = { readonly __bpfObject: unique symbol };
/** A live pcap capture handle. */
export type PcapHandle = { readonly __pcap: unique symbol };
/** An open .pcap output file. */
export type PcapDumper = { readonly __pcapDump: unique symbol };

export interface BpfProgInfo {
  id: number;
  name: string;
  /** Cumulative; only advance while kernel.bpf_stats_enabled = 1. */
  runTimeNs: bigint;
  runCount: bigint;
}

export interface PcapOpenOptions {
  snaplen?: number;
  bufferSize?: number;
  timeoutMs?: number;
  immediate?: 0 | 1;
  /** 0 both directions, 1 inbound only, 2 outbound only. */
  direction?: 0 | 1 | 2;
  netnsPath?: string;
}

export interface CaptureAddon {
  bpfObjectOpen(path: string): BpfObject;
  bpfObjectSetInitialValue(obj: BpfObject, mapName: string, bytes: Uint8Array): void;
  bpfObjectLoad(obj: BpfObject): void;
  bpfObjectMapFd(obj: BpfObject, name: string): number;
  bpfObjectProgFd(obj: BpfObject, name: string): number;
  bpfObjectClose(obj: BpfObject): void;
  bpfTcxAttach(progFd: number, ifname: string, egress: boolean, flags: number, netnsPath?: string): number;
  bpfTcxQuery(ifname: string, egress: boolean, netnsPath?: string): number[];
  bpfLinkDetach(linkFd: number): void;
  bpfTcAttach(ifname: string, egress: boolean, handle: number, priority: number, progFd: number, netnsPath?: string): void;
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
  bpfPossibleCpus(): number;

  pcapOpen(ifname: string, options: PcapOpenOptions): PcapHandle;
  pcapDatalink(cap: PcapHandle): number;
  pcapSetFilter(cap: PcapHandle, expression: string): void;
  pcapFd(cap: PcapHandle): number;
  /** Per packet 5 words in meta: ts sec, ts usec, captured length, wire length, data offset. */
  pcapRead(cap: PcapHandle, data: Uint8Array, meta: Uint32Array): number;
  /** [received, dropped by the buffer, dropped by the interface] */
  pcapStats(cap: PcapHandle): [number, number, number];
  pcapClose(cap: PcapHandle): void;
  pcapDumpOpen(cap: PcapHandle, path: string): PcapDumper;
  pcapDumpWrite(dump: PcapDumper, data: Uint8Array, meta: Uint32Array, first: number, count: number): void;
  pcapDumpClose(dump: PcapDumper): void;
}

/** Words per packet in pcapRead's meta array. */
export const PCAP_META_WORDS = 5;

export function captureAddon(): CaptureAddon {
  return native() as unknown as CaptureAddon;
}
