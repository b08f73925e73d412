// Bindings of native/poll.c: uv_poll readiness on a file descriptor.

/** Opaque handle of a uv_poll watcher. */
export type PollHandle = { readonly __poll: unique symbol };

/** uv_poll's UV_READABLE: the events pollSet watches for. */
export const UV_READABLE = 1;

export interface PollAddon {
  /**
   * A negative status is libuv saying it saw POLLERR on the fd and STOPPED watching it (it does
   * so for every poll handle): nothing more is delivered until pollSet watches it again. A socket
   * error (a netlink ENOBUFS, an AF_PACKET ENETDOWN) is cleared by the next read of the socket,
   * so the owner reads, then decides to watch again.
   */
  pollStart(fd: number, cb: (status: number, events: number) => void): PollHandle;
  pollSet(handle: PollHandle, events: number): void;
  pollStop(handle: PollHandle): void;
}
