// A bundle directory's files, read once, with the manifest's word on missing ones; what fromBundle reads.
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { errText } from '../errors.js';
import { readFileBounded } from '../read-bounded.js';
import type { BundleManifest } from './manifest.js';

/** Largest bundle file read, so an oversized one is refused with its size instead of hitting V8's string limit. */
export const MAX_BUNDLE_FILE = 400 << 20;

export class BundleFiles {
  manifest: BundleManifest | undefined;
  constructor(
    readonly dir: string,
    readonly names: string[],
  ) {}
  has(name: string): boolean {
    return this.names.includes(name);
  }
  path(name: string): string {
    return join(this.dir, name);
  }
  text(name: string): string {
    try {
      const size = statSync(this.path(name)).size;
      if (size > MAX_BUNDLE_FILE)
        throw new Error(`${size} bytes, more than the ${MAX_BUNDLE_FILE >> 20} MiB clbprobe reads of one file`);
      // The size stat gives bounds a regular file; a device or a file still growing is bounded here.
      return readFileBounded(this.path(name), MAX_BUNDLE_FILE, 'bundle file').toString('utf8');
    } catch (e) {
      throw new Error(`${this.path(name)}: cannot read: ${errText(e)}`);
    }
  }
  /** Why a file is not there: the manifest's error for the command that should have written it, if any. */
  whyMissing(what: string): string {
    const step = this.manifest?.files.find((f) => f.file === what || (f.error && commandWrites(f.command, what)));
    if (step?.error) return `${what} not in the bundle: ${step.command}: ${step.error}`;
    return `${what} not in the bundle (see src/bundle/README.md for the command that makes it)`;
  }
  newestMtime(): string {
    let newest = 0;
    for (const n of this.names) {
      try {
        newest = Math.max(newest, statSync(this.path(n)).mtimeMs);
      } catch {
        // vanished meanwhile: ignore
      }
    }
    return new Date(newest || Date.now()).toISOString();
  }
}

/** Whether a manifest command is the one behind a bundle file name (e.g. 'ipvsadm-save -n' → ipvsadm-save.txt). */
function commandWrites(command: string, file: string): boolean {
  const base = file.replace(/\.(txt|json)$/, '');
  return command.split(' ').some((w) => w === base || base.startsWith(w));
}
