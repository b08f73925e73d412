// Reads a file that comes from outside (a kubeconfig, credentials, kube-proxy's config) up to a
// bound. The size stat gives is no bound: a character device (a token path of /dev/zero) and
// procfs files report 0, and a file may grow between the stat and the read. So at most
// maxBytes + 1 bytes are ever read, and one byte past the bound is the error.
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';

export class FileTooLargeError extends Error {
  constructor(
    readonly path: string,
    readonly maxBytes: number,
    what: string,
  ) {
    super(`${what} ${path} is larger than ${sizeText(maxBytes)}, the most clbprobe reads of it`);
    this.name = 'FileTooLargeError';
  }
}

/** '1 MiB', '64 KiB', '100 bytes'. */
function sizeText(bytes: number): string {
  if (bytes >= 1 << 20 && bytes % (1 << 20) === 0) return `${bytes >> 20} MiB`;
  if (bytes >= 1 << 10 && bytes % (1 << 10) === 0) return `${bytes >> 10} KiB`;
  return `${bytes} bytes`;
}

/**
 * The file's bytes; a FileTooLargeError (naming `what`, the path and the bound) when it holds more
 * than maxBytes; the fs error (ENOENT, EACCES...) as thrown by open/read otherwise.
 */
export function readFileBounded(path: string, maxBytes: number, what: string): Buffer {
  const fd = openSync(path, 'r');
  try {
    // A regular file is read into one buffer of its size (+1 to see it grew); a device or a
    // procfs file (size 0) into one that doubles as needed. Never more than maxBytes + 1.
    const size = fstatSync(fd).size;
    let buf = Buffer.allocUnsafe(Math.min(maxBytes + 1, size > 0 ? size + 1 : 64 << 10));
    let total = 0;
    for (;;) {
      if (total === buf.length) {
        if (total > maxBytes) throw new FileTooLargeError(path, maxBytes, what);
        const bigger = Buffer.allocUnsafe(Math.min(maxBytes + 1, buf.length * 2));
        buf.copy(bigger, 0, 0, total);
        buf = bigger;
      }
      const n = readSync(fd, buf, total, buf.length - total, null);
      if (n === 0) break;
      total += n;
    }
    if (total > maxBytes) throw new FileTooLargeError(path, maxBytes, what);
    return buf.subarray(0, total);
  } finally {
    closeSync(fd);
  }
}
