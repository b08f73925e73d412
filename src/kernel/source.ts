// Turning a reader's failure into a SourceStatus with a reason a human can act on.

import { errText } from '../errors.js';
import { isPermissionErrno, permissionDenied } from '../model/permission.js';
import type { SourceStatus } from '../model/source-status.js';
import { isSyscallError } from '../native/addon.js';
import { errnoName, NetlinkError } from './netlink/socket.js';

/** The errno name of a syscall or netlink error, if it is one. */
export function errorCode(e: unknown): string | undefined {
  if (isSyscallError(e)) return e.code;
  if (e instanceof NetlinkError) return errnoName(e.errno);
  return undefined;
}

export function isPermissionError(e: unknown): boolean {
  return isPermissionErrno(errorCode(e));
}

export function sourceFailure(
  source: SourceStatus['source'],
  e: unknown,
  capability: string,
  t0: number,
): SourceStatus {
  const msg = errText(e);
  const reason = isPermissionError(e) ? permissionDenied(capability, msg) : msg;
  return { source, available: false, reason, durationMs: performance.now() - t0 };
}
