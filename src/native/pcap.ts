// Bindings of native/pcap.c: libpcap capture and .pcap files.
import { loadAddon } from './addon.js';

/** A live pcap capture handle. */
export type PcapHandle = { readonly __pcap: unique symbol };
/** An open .pcap output file. */
export type PcapDumper = { readonly __pcapDump: unique symbol };

export interface PcapOpenOptions {
  snaplen?: number;
  bufferSize?: number;
  timeoutMs?: number;
  immediate?: 0 | 1;
  /** 0 both directions, 1 inbound only, 2 outbound only. */
  direction?: 0 | 1 | 2;
  netnsPath?: string;
}

export interface PcapAddon {
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

export function pcapAddon(): PcapAddon {
  return loadAddon() as PcapAddon;
}
