// Network namespace names as `ip netns` knows them, or explicit paths.
import { existsSync } from 'node:fs';
import { UserError } from './user-error.js';

export function netnsPath(nameOrPath: string): string {
  const p = nameOrPath.includes('/') ? nameOrPath : `/var/run/netns/${nameOrPath}`;
  if (!existsSync(p)) throw new UserError(`--netns: no network namespace at ${p}`);
  return p;
}
