// Loads the project's N-API addon (native/, built by `npm run build:native`): thin syscall wrappers.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** An Error thrown by the addon for a failed syscall. */
export interface SyscallError extends Error {
  code: string;
  errno: number;
}

export function isSyscallError(error: unknown): error is SyscallError {
  return error instanceof Error && typeof (error as Partial<SyscallError>).errno === 'number';
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

let cached: unknown;

/** The loaded addon, untyped: each part is typed in the file named after its C file (netlink, poll, bpf, pcap). */
export function loadAddon(): unknown {
  if (cached) return cached;
  const path = join(projectRoot(), 'build', 'Release', 'clbprobe.node');
  if (!existsSync(path)) {
    throw new Error(`clbprobe: native addon not built (${path} missing); run: npm run build`);
  }
  cached = createRequire(import.meta.url)(path) as unknown;
  return cached;
}
