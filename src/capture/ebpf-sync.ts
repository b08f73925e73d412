// Keeps the maps the agent writes (TARGET_MAPS) equal to the targets, writing only what changed; only the small maps
// (hosts, config, filters) are mirrored, since a VIP key's slot never changes and a NodePort's only with a new family.
import type { BpfAddon } from '../native/bpf.js';
import {
  MAP_CONFIG,
  MAP_FILTERS,
  MAP_HOSTS4,
  MAP_HOSTS6,
  MAP_NODEPORTS,
  MAP_VIPS4,
  MAP_VIPS6,
  MAP_VIPTAB,
  NODEPORT_SLOT_V4,
  NODEPORT_SLOT_V6,
  NODEPORT_VALUE_SIZE,
  u32Value,
} from './bpf-layout.js';
import { bytesText, isVip4, textBytes, type VipKey, vipCounterId } from './ebpf-keys.js';
import { type MapContents, nodePortValue, TARGET_MAPS, type TargetMap, vipValue, wantedMaps } from './ebpf-maps.js';
import { SlotAllocator, VipTable } from './ebpf-tables.js';
import { captureError } from './errors.js';
import type { Targets } from './targets.js';

const KEY0 = u32Value(0);
const BPF_ANY = 0;
/** A nodeports entry that goes is written as zeros: entries of an array map cannot be deleted. */
const ZERO_NODEPORT = Buffer.alloc(NODEPORT_VALUE_SIZE);

export class TargetSync {
  readonly slots: SlotAllocator;
  /** Where each VIP entry sits in the viptab buckets; its keys are those of vips4/vips6. */
  readonly table = new VipTable();
  /** VIP keys and buckets changed in the table but maybe not in the kernel: this sync's, or a failed write's. */
  private readonly pending4 = new Set<VipKey>();
  private readonly pending6 = new Set<VipKey>();
  private readonly pendingBuckets = new Set<number>();
  /** nodeports indexes the kernel's array may hold non-zero. */
  private nodePortsHeld = new Set<number>();
  /** After a failed nodeports write: every wanted NodePort is rewritten, not only the new ones. */
  private nodePortsUnsure = false;
  /** The families whose NodePort keys the last sync gave slots (wantedMaps' nodePortFamilies). */
  private nodePortFamilies = 0;
  /** A family got NodePort slots since the last completed write, so held NodePorts may have new slots. */
  private nodePortsGained = false;
  /** slots.used at the last completed nodeports write: every slot its values hold is below. */
  private nodePortSlotsFrom = 1;
  private readonly hosts: Record<string, MapContents> = { [MAP_HOSTS4]: new Map(), [MAP_HOSTS6]: new Map() };
  /** The config's and filters' value as written, by map name; none before the first write, or after a failed one. */
  private readonly values: Record<string, Buffer> = {};

  constructor(
    private readonly addon: BpfAddon,
    private readonly fds: Record<string, number>,
    maxSlots?: number,
  ) {
    this.slots = new SlotAllocator(maxSlots);
  }

  /** Throws a CaptureError ('maps') naming the map whose write failed; the next sync completes the work. */
  sync(t: Targets): void {
    let w: ReturnType<typeof wantedMaps>;
    try {
      w = wantedMaps(t, this.slots);
    } catch (e) {
      throw captureError(e, 'maps', 'preparing the eBPF maps');
    }
    if (w.nodePortFamilies & ~this.nodePortFamilies) this.nodePortsGained = true;
    this.nodePortFamilies = w.nodePortFamilies;
    const change = this.table.update(w.vips);
    for (const k of [...change.added, ...change.removed]) (isVip4(k) ? this.pending4 : this.pending6).add(k);
    for (const b of change.buckets) this.pendingBuckets.add(b);
    const steps: Record<TargetMap, () => void> = {
      [MAP_VIPS4]: () => this.syncVips(MAP_VIPS4, this.pending4),
      [MAP_VIPS6]: () => this.syncVips(MAP_VIPS6, this.pending6),
      [MAP_VIPTAB]: () => this.syncBuckets(),
      [MAP_HOSTS4]: () => this.syncHosts(MAP_HOSTS4, w.hosts4),
      [MAP_HOSTS6]: () => this.syncHosts(MAP_HOSTS6, w.hosts6),
      [MAP_NODEPORTS]: () => this.syncNodePorts(w.nodePorts),
      [MAP_CONFIG]: () => this.syncValue(MAP_CONFIG, w.config),
      [MAP_FILTERS]: () => this.syncValue(MAP_FILTERS, w.filters),
    };
    for (const name of TARGET_MAPS) {
      try {
        steps[name]();
      } catch (e) {
        throw captureError(e, 'maps', `updating the eBPF ${name} map`);
      }
    }
  }

  /** Keys in the table written with their slot, first; then the others deleted. */
  private syncVips(name: string, pending: Set<VipKey>): void {
    const fd = this.fds[name]!;
    for (const k of pending) {
      if (this.table.has(k)) this.addon.bpfMapUpdate(fd, textBytes(k), vipValue(k, this.slots), BPF_ANY);
    }
    for (const k of pending) if (!this.table.has(k)) this.addon.bpfMapDelete(fd, textBytes(k));
    pending.clear();
  }

  private syncBuckets(): void {
    const slotOf = (k: VipKey) => this.slots.find(vipCounterId(k));
    for (const b of this.pendingBuckets) {
      this.addon.bpfMapUpdate(this.fds[MAP_VIPTAB]!, u32Value(b), this.table.bucket(b, slotOf), BPF_ANY);
      this.pendingBuckets.delete(b);
    }
  }

  /** Writes new and changed entries before deletions, so a key present in both never disappears. */
  private syncHosts(name: string, wanted: Map<string, number>): void {
    const fd = this.fds[name]!;
    const current = this.hosts[name]!;
    const next: MapContents = new Map([...wanted].map(([k, flags]) => [k, bytesText(u32Value(flags))]));
    // Until done, the map holds a mix of both: every key has an unknown value for the next sync to rewrite or delete.
    this.hosts[name] = new Map([...current.keys(), ...next.keys()].map((k) => [k, '']));
    for (const [key, value] of next) {
      if (current.get(key) !== value) this.addon.bpfMapUpdate(fd, textBytes(key), textBytes(value), BPF_ANY);
    }
    for (const key of current.keys()) if (!next.has(key)) this.addon.bpfMapDelete(fd, textBytes(key));
    this.hosts[name] = next;
  }

  /** New NodePorts and held ones with a new slot are written first, then the ones gone are zeroed. */
  private syncNodePorts(indexes: number[]): void {
    const fd = this.fds[MAP_NODEPORTS]!;
    const held = this.nodePortsHeld;
    const wanted = new Set(indexes);
    // Only after a family got slots can a NodePort written before have a new slot.
    const from = this.nodePortsGained ? this.nodePortSlotsFrom : 0;
    const newSlot = (i: number) => {
      const v = nodePortValue(i, this.slots);
      return v.readUInt16LE(NODEPORT_SLOT_V4) >= from || v.readUInt16LE(NODEPORT_SLOT_V6) >= from;
    };
    const add = [...wanted].filter((i) => this.nodePortsUnsure || !held.has(i) || (from > 0 && newSlot(i)));
    const zero = [...held].filter((i) => !wanted.has(i));
    if (add.length || zero.length) {
      // Until the last write is done the array may hold any of both, and wanted ones may be missing.
      for (const i of wanted) held.add(i);
      this.nodePortsUnsure = true;
      // An index's value only gains slots, so a value of zeros is already in the array.
      const hasSlot = (i: number) => nodePortValue(i, this.slots).some((b) => b !== 0);
      for (const i of add)
        if (hasSlot(i)) this.addon.bpfMapUpdate(fd, u32Value(i), nodePortValue(i, this.slots), BPF_ANY);
      for (const i of zero) if (hasSlot(i)) this.addon.bpfMapUpdate(fd, u32Value(i), ZERO_NODEPORT, BPF_ANY);
    }
    this.nodePortsHeld = wanted;
    this.nodePortsUnsure = this.nodePortsGained = false;
    this.nodePortSlotsFrom = this.slots.used;
  }

  /** A one-value array map (config, filters): written when its value differs from the one written last. */
  private syncValue(name: string, next: Buffer): void {
    if (this.values[name]?.equals(next)) return;
    delete this.values[name]; // unknown, should the write fail
    this.addon.bpfMapUpdate(this.fds[name]!, KEY0, next, BPF_ANY);
    this.values[name] = next;
  }
}
