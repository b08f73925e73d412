// Bindings of native/mem.c: the C heap's free pages back to the kernel.
import { loadAddon } from './addon.js';

export interface MemAddon {
  /** glibc's malloc_trim(0): true when pages were released; false on other C libraries (nothing to do). */
  trimCHeap(): boolean;
}

export function memAddon(): MemAddon {
  return loadAddon() as MemAddon;
}
