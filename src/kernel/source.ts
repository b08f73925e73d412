// Turning a reader's failure into a SourceStatus with a reason a human can act on.

import { errText } from '../errors.js';
import { isPermissionErrno, permissionDenied } from '../model/permission.js';
import type { SourceStatus } from '../model/source-status.js';
import { isSyscallError } from '../native/addon.js';
import { NetlinkError } from './netlink/socket.js';

/** A refused syscall or netlink request names the capability that would have allowed it. */
export function sourceFailure(
  source: SourceStatus['source'],
  e: unknown,
  capability: string,
  t0: number,
): SourceStatus {
  const msg = errText(e);
  const code = isSyscallError(e) || e instanceof NetlinkError ? e.code : undefined;
  const reason = isPermissionErrno(code) ? permissionDenied(capability, msg) : msg;
  return { source, available: false, reason, durationMs: performance.now() - t0 };
}
