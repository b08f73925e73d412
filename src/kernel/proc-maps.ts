// /proc/<pid>/maps (proc(5)): one mapping per line, `start-end perms offset dev inode [pathname]`, the pathname
// possibly holding spaces, "(deleted)" or a pseudo-name like [heap]. Addresses are bigints: user space passes 2^53.
import { readFileBounded } from '../read-bounded.js';

export interface Mapping {
  start: bigint;
  end: bigint;
  readable: boolean;
  writable: boolean;
  executable: boolean;
  /** MAP_PRIVATE ('p'), not MAP_SHARED ('s'). */
  private: boolean;
  offset: bigint;
  inode: number;
  /** '' for an anonymous mapping. */
  path: string;
}

export interface ProcMaps {
  mappings: Mapping[];
  /** Lines that are not a mapping, with their line number; the other lines are still read. */
  errors: string[];
}

const LINE = /^([0-9a-f]+)-([0-9a-f]+) ([r-])([w-])([x-])([ps]) ([0-9a-f]+) [0-9a-f]+:[0-9a-f]+ (\d+)(?: +(.*))?$/;

export function parseProcMaps(text: string): ProcMaps {
  const mappings: Mapping[] = [];
  const errors: string[] = [];
  const lines = text.split('\n');
  // A complete file ends with a newline: its last element is ''.
  const n = lines[lines.length - 1] === '' ? lines.length - 1 : lines.length;
  for (let i = 0; i < n; i++) {
    const m = LINE.exec(lines[i]!);
    const start = m ? BigInt(`0x${m[1]}`) : 0n;
    const end = m ? BigInt(`0x${m[2]}`) : 0n;
    if (!m || end <= start) {
      errors.push(`line ${i + 1}: not a mapping: ${JSON.stringify(lines[i]!.slice(0, 120))}`);
      continue;
    }
    mappings.push({
      start,
      end,
      readable: m[3] === 'r',
      writable: m[4] === 'w',
      executable: m[5] === 'x',
      private: m[6] === 'p',
      offset: BigInt(`0x${m[7]}`),
      inode: Number(m[8]),
      path: m[9] ?? '',
    });
  }
  return { mappings, errors };
}

/** Bound on the maps text, ample for a process with thousands of regions. */
export const PROC_MAPS_MAX_BYTES = 1 << 20;

export function readProcMaps(pid: number | 'self' = 'self'): ProcMaps {
  return parseProcMaps(readFileBounded(`/proc/${pid}/maps`, PROC_MAPS_MAX_BYTES, 'memory map').toString('latin1'));
}
