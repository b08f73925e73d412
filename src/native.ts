// Loads the project's N-API addon (native/, built by `npm run build:native`).
// Everything it exports is a thin syscall wrapper; see native/*.c.
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface NativeAddon {
  nlOpen(protocol: number, netnsPath?: string): number;
  nlBind(fd: number, groups: number): number;
  nlSetsockopt(fd: number, level: number, optname: number, value: number): void;
  nlGetsockopt(fd: number, level: number, optname: number): number;
  nlSend(fd: number, buf: Uint8Array): number;
  /** status[0]=count, status[1]=errno that ended the batch (EAGAIN: the queue is empty; 0: the buffer or the count was full, more may wait), status[2+i]=length of datagram i. */
  nlRecv(fd: number, buf: Uint8Array, status: Int32Array, maxDatagram?: number): number;
  nlClose(fd: number): void;
  pollStart(fd: number, cb: (status: number, events: number) => void): PollHandle;
  pollSet(handle: PollHandle, events: number): void;
  pollStop(handle: PollHandle): void;
}

/** Opaque handle of a uv_poll watcher. */
export type PollHandle = { readonly __poll: unique symbol };

/** An Error thrown by the addon for a failed syscall. */
export interface SyscallError extends Error {
  code: string;
  errno: number;
}

export function isSyscallError(e: unknown): e is SyscallError {
  return e instanceof Error && typeof (e as Partial<SyscallError>).errno === 'number';
}

/** The project's root directory (where package.json lives), from src/ or dist/src/. */
export function projectRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'binding.gyp'))) return dir;
    dir = dirname(dir);
  }
  throw new Error('clbprobe: cannot find the project root (package.json next to binding.gyp)');
}

let cached: NativeAddon | undefined;

export function native(): NativeAddon {
  if (cached) return cached;
  const path = join(projectRoot(), 'build', 'Release', 'clbprobe.node');
  if (!existsSync(path)) {
    throw new Error(`clbprobe: native addon not built (${path} missing); run: npm run build`);
  }
  cached = createRequire(import.meta.url)(path) as NativeAddon;
  return cached;
}
