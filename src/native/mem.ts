// Bindings of native/mem.c: memory back to the kernel.
import { loadAddon } from './addon.js';

export interface MemAddon {
  /** madvise(start, length, MADV_PAGEOUT) on the process's own memory; throws the errno (EINVAL before Linux 5.4). */
  pageOut(start: bigint, length: bigint): void;
}

export function memAddon(): MemAddon {
  return loadAddon() as MemAddon;
}
