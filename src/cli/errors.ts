// How subcommands fail: one clear line on stderr and a documented exit code.
import { isSyscallError } from '../native/addon.js';
import { NetlinkError } from '../kernel/netlink/socket.js';

/** Exit codes shared by all subcommands. */
export const EXIT_OK = 0;
/** diagnose: an active loopback was found. */
export const EXIT_FINDING = 1;
/** Usage errors, missing privileges, unreadable inputs. */
export const EXIT_ERROR = 2;

/** A failure the user can act on; message is printed as is. */
export class UserError extends Error {
  constructor(
    message: string,
    readonly exitCode = EXIT_ERROR,
  ) {
    super(message);
    this.name = 'UserError';
  }
}

/** Turns EPERM/EACCES from the kernel into a line that names the capability to add. */
export function privilegeError(e: unknown, what: string, capability: string): UserError | undefined {
  const code = isSyscallError(e) ? e.code : e instanceof NetlinkError ? e.code : undefined;
  if (code === 'EPERM' || code === 'EACCES') {
    return new UserError(`${what}: permission denied; run as root or grant ${capability}`);
  }
  return undefined;
}

export function fail(e: unknown): never {
  const msg = e instanceof Error ? e.message : String(e);
  process.stderr.write(`clbprobe: ${msg}\n`);
  process.exit(e instanceof UserError ? e.exitCode : EXIT_ERROR);
}
