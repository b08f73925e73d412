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

/** A flag's whole number from 1 to `max`; a UserError naming the flag otherwise. */
export function intFlag(text: string, flag: string, max?: number, unit?: string): number {
  const n = Number(text);
  if (Number.isInteger(n) && n >= 1 && n <= (max ?? Number.POSITIVE_INFINITY)) return n;
  const want = max === undefined ? 'a positive integer' : `1-${max}${unit ? ` ${unit}` : ''}`;
  throw new UserError(`${flag}: expected ${want}, not ${JSON.stringify(text)}`);
}

/** A flag's NAMESPACE/NAME; a UserError naming the flag otherwise. */
export function namespacedFlag(text: string, flag: string): { namespace: string; name: string } {
  const m = /^([a-z0-9-]{1,63})\/([a-z0-9.-]{1,253})$/.exec(text);
  if (!m) throw new UserError(`${flag}: expected NAMESPACE/NAME, not ${JSON.stringify(text)}`);
  return { namespace: m[1]!, name: m[2]! };
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
