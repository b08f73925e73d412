// What counts as "not allowed" from the kernel and how a source says so: `snapshot` tells it from a missing datapath.

/** The errno names the kernel answers with when the caller lacks a capability (or a LSM refuses). */
export function isPermissionErrno(code: string | undefined): boolean {
  return code === 'EPERM' || code === 'EACCES';
}

/** A source's reason for a privilege failure; `isPermissionReason` recognises it. */
export function permissionDenied(capability: string, detail: string): string {
  return `permission denied (needs ${capability}): ${detail}`;
}

export function isPermissionReason(reason: string | undefined): boolean {
  return reason?.startsWith('permission denied') === true;
}
