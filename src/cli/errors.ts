// How subcommands fail: one clear line on stderr and a documented exit code.
import { errText } from '../errors.js';
import { printable } from '../printable.js';
import { EXIT_ERROR, UserError } from '../user-error.js';

export { EXIT_ERROR, EXIT_FINDING, EXIT_OK, UserError } from '../user-error.js';

export function fail(error: unknown): never {
  const msg = errText(error);
  process.stderr.write(`clbprobe: ${printable(msg)}\n`);
  process.exit(error instanceof UserError ? error.exitCode : EXIT_ERROR);
}

/** A command's action that fails as `fail` does. */
export function failing<A extends unknown[]>(action: (...args: A) => Promise<unknown>): (...args: A) => Promise<void> {
  return async (...args) => {
    try {
      await action(...args);
    } catch (e) {
      fail(e);
    }
  };
}
