// The key and stats layouts src/kernel/conntrack/kernel-filter.ts writes into
// and reads out of native/bpf/ctevents.bpf.c's maps, checked against the
// compiled object's BTF (needs the build: npm run build).
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import * as K from '../../../src/kernel/conntrack/kernel-filter.js';
import { Btf } from '../../support/btf.js';

const BPF_MAP_TYPE_HASH = 1;
const BPF_MAP_TYPE_PERCPU_ARRAY = 6;

describe('ctevents.bpf.o map layouts (BTF) against kernel-filter.ts', () => {
  if (!existsSync(K.ctEventsObjectPath())) throw new Error(`${K.ctEventsObjectPath()} missing: npm run build`);
  const btf = Btf.fromObject(K.ctEventsObjectPath());

  it('has the program the socket filter attaches', () => {
    expect(btf.functions()).toContain(K.CT_FILTER_PROGRAM);
  });

  it('ct_keys: struct ct_key and a one-byte value, MAX_KEYS entries', () => {
    const m = btf.map(K.CT_MAP_KEYS);
    expect(m).toMatchObject({
      type: BPF_MAP_TYPE_HASH,
      maxEntries: K.KERNEL_FILTER_MAX_KEYS,
      keySize: K.CT_KEY_SIZE,
      valueSize: K.CT_VALUE_SIZE,
    });
    const k = btf.struct('ct_key');
    expect(k.size).toBe(K.CT_KEY_SIZE);
    expect(k.members.addr).toMatchObject({ offset: K.CT_KEY_ADDR, size: 4 });
    expect(k.members.port).toMatchObject({ offset: K.CT_KEY_PORT, size: 2 });
    expect(k.members.proto).toMatchObject({ offset: K.CT_KEY_PROTO, size: 1 });
    expect(k.members.kind).toMatchObject({ offset: K.CT_KEY_KIND, size: 1 });
  });

  it('ct_stats: u64 per CPU at the passed and dropped slots', () => {
    const m = btf.map(K.CT_MAP_STATS);
    expect(m).toMatchObject({ type: BPF_MAP_TYPE_PERCPU_ARRAY, keySize: 4, valueSize: 8 });
    const slots = btf.enumValues('stat');
    expect(slots).toMatchObject({
      STAT_PASSED: K.CT_STAT_PASSED,
      STAT_DROPPED: K.CT_STAT_DROPPED,
      STAT_MAX: K.CT_STAT_SLOTS,
    });
    expect(m.maxEntries).toBe(K.CT_STAT_SLOTS);
  });
});
