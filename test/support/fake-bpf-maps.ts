// The eBPF target maps as the kernel would hold them, for TargetSync (src/capture/ebpf-maps.ts) to write into.
import { MAP_CONFIG, MAP_FILTERS, MAP_NODEPORTS, MAP_VIPTAB } from '../../src/capture/bpf-layout.js';
import { TARGET_MAPS, TargetSync } from '../../src/capture/ebpf-maps.js';
import type { Targets } from '../../src/capture/targets.js';
import type { BpfAddon } from '../../src/native/bpf.js';

/** Array maps: an entry of zeros is no entry. */
export const ARRAYS = new Set<string>([MAP_NODEPORTS, MAP_VIPTAB, MAP_CONFIG, MAP_FILTERS]);

/** Map name -> key (hex) -> value (hex). */
export type HexMaps = Map<string, Map<string, string>>;

export class FakeMaps {
  readonly maps: HexMaps = new Map(TARGET_MAPS.map((m) => [m, new Map()]));
  readonly fds: Record<string, number> = Object.fromEntries(TARGET_MAPS.map((m, i) => [m, 100 + i]));
  writes = 0;
  /** Write number (counted from 1) that fails with EPERM; 0 = none. */
  failAt = 0;

  readonly addon = {
    bpfMapUpdate: (fd: number, key: Uint8Array, value: Uint8Array) => {
      const name = this.nameOf(fd);
      this.step();
      const k = Buffer.from(key).toString('hex');
      if (ARRAYS.has(name) && value.every((b) => b === 0)) this.maps.get(name)!.delete(k);
      else this.maps.get(name)!.set(k, Buffer.from(value).toString('hex'));
    },
    bpfMapDelete: (fd: number, key: Uint8Array) => {
      const name = this.nameOf(fd);
      this.step();
      return this.maps.get(name)!.delete(Buffer.from(key).toString('hex'));
    },
  } as unknown as BpfAddon;

  /** The value the map holds under `key`, undefined when none. */
  value(name: string, key: Uint8Array): Buffer | undefined {
    const v = this.maps.get(name)!.get(Buffer.from(key).toString('hex'));
    return v === undefined ? undefined : Buffer.from(v, 'hex');
  }

  /** The values the map holds, in the order written. */
  values(name: string): Buffer[] {
    return [...this.maps.get(name)!.values()].map((v) => Buffer.from(v, 'hex'));
  }

  private step(): void {
    if (++this.writes === this.failAt) throw Object.assign(new Error('bpf_map_update_elem: EPERM'), { code: 'EPERM' });
  }

  private nameOf(fd: number): string {
    const name = TARGET_MAPS[fd - 100];
    if (!name) throw new Error(`fd ${fd} is no target map`);
    return name;
  }
}

/** A TargetSync writing into a FakeMaps, synced once with each of `steps` in turn. */
export function syncedMaps(steps: Targets[], maxSlots?: number): { kernel: FakeMaps; sync: TargetSync } {
  const kernel = new FakeMaps();
  const sync = new TargetSync(kernel.addon, kernel.fds, maxSlots);
  for (const t of steps) sync.sync(t);
  return { kernel, sync };
}
