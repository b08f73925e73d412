// How subcommands fail: one clear line on stderr and a documented exit code.

import { errText } from '../errors.js';
import { isPermissionError } from '../kernel/source.js';
import { printable } from '../printable.js';
import { EXIT_ERROR, UserError } from '../user-error.js';

export { EXIT_ERROR, EXIT_FINDING, EXIT_OK, UserError } from '../user-error.js';

/** Turns EPERM/EACCES from the kernel into a line that names the capability to add. */
export function privilegeError(e: unknown, what: string, capability: string): UserError | undefined {
  if (isPermissionError(e)) {
    return new UserError(`${what}: permission denied; run as root or grant ${capability}`);
  }
  return undefined;
}

export function fail(e: unknown): never {
  const msg = errText(e);
  process.stderr.write(`clbprobe: ${printable(msg)}\n`);
  process.exit(e instanceof UserError ? e.exitCode : EXIT_ERROR);
}
