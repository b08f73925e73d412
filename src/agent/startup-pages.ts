// After each start-up phase, pages out the private read-only file mappings start-up touched (never writable or
// anonymous ones): the kernel reclaims clean file pages only under pressure and skips shared ones, so RSS shows it.
import { errText } from '../errors.js';
import { type Mapping, type ProcMaps, readProcMaps } from '../kernel/proc-maps.js';
import { isSyscallError } from '../native/addon.js';
import { memAddon } from '../native/mem.js';
import { readFileBounded } from '../read-bounded.js';

export interface StartupPagesIo {
  readMaps(): ProcMaps;
  pageOut(start: bigint, length: bigint): void;
  /** RssFile of /proc/self/status in KiB; undefined when unreadable. */
  rssFileKiB(): number | undefined;
}

export interface StartupPagesRelease {
  mappings: number;
  /** Their total size (mapped, not resident). */
  mappedBytes: number;
  rssFileKiBBefore?: number;
  rssFileKiBAfter?: number;
  /** Why some or all of it was not done; [] when every selected mapping was paged out. */
  errors: string[];
  /** MADV_PAGEOUT refused as a whole (EINVAL on the first mapping): later releases would fail the same way. */
  unsupported?: true;
}

/** The mappings whose pages start-up leaves resident: a file's code and constants, private, read-only. */
export function isStartupFileMapping(m: Mapping): boolean {
  return m.path.startsWith('/') && !m.path.endsWith(' (deleted)') && m.private && !m.writable && m.readable;
}

export function releaseStartupPages(io: StartupPagesIo): StartupPagesRelease {
  const r: StartupPagesRelease = { mappings: 0, mappedBytes: 0, errors: [] };
  const before = io.rssFileKiB();
  if (before !== undefined) r.rssFileKiBBefore = before;
  let maps: ProcMaps;
  try {
    maps = io.readMaps();
  } catch (e) {
    r.errors.push(`reading /proc/self/maps: ${errText(e)}`);
    return r;
  }
  r.errors.push(...maps.errors.slice(0, 5));
  if (maps.errors.length > 5) r.errors.push(`${maps.errors.length - 5} more lines of /proc/self/maps unreadable`);
  for (const m of maps.mappings) {
    if (!isStartupFileMapping(m)) continue;
    try {
      io.pageOut(m.start, m.end - m.start);
    } catch (e) {
      if (isSyscallError(e) && e.errno === EINVAL_ERRNO && r.mappings === 0) {
        // Refused before anything was paged out: every mapping would get the same answer.
        r.errors.push(
          'madvise(MADV_PAGEOUT) is refused (EINVAL: a kernel before Linux 5.4, or ' +
            'memory locked with mlockall): start-up pages stay until memory pressure',
        );
        r.unsupported = true;
        break;
      }
      r.errors.push(`${m.path}: ${errText(e)}`);
      continue;
    }
    r.mappings++;
    r.mappedBytes += Number(m.end - m.start);
  }
  const after = io.rssFileKiB();
  if (after !== undefined) r.rssFileKiBAfter = after;
  return r;
}

const EINVAL_ERRNO = 22;

/** The process's own maps, the addon's madvise and /proc/self/status. */
export function processStartupPagesIo(): StartupPagesIo {
  return {
    readMaps: () => readProcMaps('self'),
    pageOut: (start, length) => memAddon().pageOut(start, length),
    rssFileKiB: () => {
      try {
        return parseRssFileKiB(readFileBounded('/proc/self/status', 64 << 10, 'process status').toString('latin1'));
      } catch {
        return undefined;
      }
    },
  };
}

/** RssFile (kB) of /proc/PID/status text; undefined when absent (kernels before 4.5). */
export function parseRssFileKiB(status: string): number | undefined {
  const m = /^RssFile:\s+(\d+) kB$/m.exec(status);
  return m ? Number(m[1]) : undefined;
}
