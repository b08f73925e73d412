// How subcommands fail: one clear line on stderr and a documented exit code.
import { errText } from '../errors.js';
import { printable } from '../printable.js';
import { EXIT_ERROR, UserError } from '../user-error.js';

export { EXIT_ERROR, EXIT_FINDING, EXIT_OK, UserError } from '../user-error.js';

export function fail(e: unknown): never {
  const msg = errText(e);
  process.stderr.write(`clbprobe: ${printable(msg)}\n`);
  process.exit(e instanceof UserError ? e.exitCode : EXIT_ERROR);
}
