// Bindings of native/poll.c: uv_poll readiness on a file descriptor.
import { loadAddon } from './addon.js';

/** Opaque handle of a uv_poll watcher. */
export type PollHandle = { readonly __poll: unique symbol };

export interface PollAddon {
  pollStart(fd: number, cb: (status: number, events: number) => void): PollHandle;
  pollSet(handle: PollHandle, events: number): void;
  pollStop(handle: PollHandle): void;
}

export function pollAddon(): PollAddon {
  return loadAddon() as PollAddon;
}
