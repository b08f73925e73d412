// The whole addon, for code that uses more than one of its C files (a netlink socket watched with uv_poll).
import { loadAddon } from './addon.js';
import type { BpfAddon } from './bpf.js';
import type { NetlinkAddon } from './netlink.js';
import type { PcapAddon } from './pcap.js';
import type { PollAddon } from './poll.js';

export type NativeAddon = NetlinkAddon & PollAddon & BpfAddon & PcapAddon;

export function native(): NativeAddon {
  return loadAddon() as NativeAddon;
}
