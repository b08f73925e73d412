// Bindings of native/poll.c: uv_poll readiness on a file descriptor.

/** Opaque handle of a uv_poll watcher. */
export type PollHandle = { readonly __poll: unique symbol };

/** uv_poll's UV_READABLE: the events pollSet watches for. */
export const UV_READABLE = 1;

export interface PollAddon {
  /** A negative status: libuv saw POLLERR and stopped watching until pollSet; the next read clears the error. */
  pollStart(fd: number, cb: (status: number, events: number) => void): PollHandle;
  pollSet(handle: PollHandle, events: number): void;
  pollStop(handle: PollHandle): void;
}
