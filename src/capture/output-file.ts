// Capture files are written as root, often in a directory others can write, so a planted symlink or file must
// never turn a capture into a write elsewhere.
import { constants, openSync } from 'node:fs';

/** Creates `file` for a capture alone (O_EXCL | O_NOFOLLOW, mode 0600: packets are private); returns its fd. */
export function createCaptureFile(file: string): number {
  try {
    return openSync(file, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' || code === 'ELOOP')
      throw new Error(`${file} exists (a capture never overwrites a file or follows a symlink): give a new file name`);
    throw e;
  }
}
