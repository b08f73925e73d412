// Comparing the netlink reader's IPVS snapshot with ipvsadm's view of the same
// table, field by field. Shared by the VM test (live kernel) and the unit test
// (the fixtures that VM run recorded).
import { expect } from 'vitest';
import { parseIpvsadm, parseIpvsadmList } from '../../../src/kernel/ipvs/ipvsadm-text.js';
import { mergeIpvsSnapshots, realServerKey, serviceKey } from '../../../src/kernel/ipvs/merge.js';
import type { IpvsSnapshot, IpvsStats, IpvsVirtualServer } from '../../../src/kernel/types.js';

/** The ipvsadm outputs the VM scenario prints (test/vm/ipvs-scenario.sh), by section name. */
export const IPVSADM_VIEWS = ['list', 'stats', 'thresholds', 'persistent-conn', 'tun-info', 'save'] as const;

const RATE_KEYS = ['cps', 'inPps', 'outPps', 'inBps', 'outBps'] as const;

function sorted(s: IpvsSnapshot): IpvsVirtualServer[] {
  return s.virtualServers
    .map((vs) => ({
      ...vs,
      realServers: [...vs.realServers].sort((a, b) => realServerKey(a).localeCompare(realServerKey(b))),
    }))
    .sort((a, b) => serviceKey(a).localeCompare(serviceKey(b)));
}

function withoutRates<T extends { stats?: IpvsStats }>(x: T): T {
  if (!x.stats) return x;
  const stats = { ...x.stats };
  for (const k of RATE_KEYS) stats[k] = 0;
  return { ...x, stats };
}

/** Every (entity, rate) pair: "TCP 10.96.0.10 80 -> 10.244.1.2 8080 inBps" → value. */
function rates(s: IpvsSnapshot): Map<string, number> {
  const out = new Map<string, number>();
  for (const vs of s.virtualServers) {
    const sk = serviceKey(vs);
    for (const k of RATE_KEYS) out.set(`${sk} ${k}`, vs.stats?.[k] ?? NaN);
    for (const rs of vs.realServers)
      for (const k of RATE_KEYS) out.set(`${sk} -> ${realServerKey(rs)} ${k}`, rs.stats?.[k] ?? NaN);
  }
  return out;
}

/**
 * Asserts that the reader saw exactly the table ipvsadm printed: every field
 * each ipvsadm view shows is equal (each view is checked on its own, so a field
 * shown by two views is checked twice), except the kernel's rate estimates,
 * which change every 2 s and must lie between the --rate views taken just
 * before and just after the reader.
 */
export function expectSameTable(reader: IpvsSnapshot, views: Record<string, string>): void {
  const all = parseIpvsadm([...IPVSADM_VIEWS, 'rate-before'].map((v) => ({ source: v, text: views[v] ?? '' })));
  expect(all.missing, 'field groups no ipvsadm view showed').toBeUndefined();
  expect(reader.virtualServers.length).toBeGreaterThan(0);
  const strip = (s: IpvsSnapshot): IpvsVirtualServer[] =>
    sorted(s).map((vs) => ({ ...withoutRates(vs), realServers: vs.realServers.map(withoutRates) }));
  for (const v of IPVSADM_VIEWS) {
    // The view's own fields first, the reader's for what the view does not show.
    const merged = mergeIpvsSnapshots([parseIpvsadm([{ source: v, text: views[v] ?? '' }]), reader]);
    expect(strip(merged), `ipvsadm view "${v}"`).toEqual(strip(reader));
  }

  const before = rates(parseIpvsadmList(views['rate-before'] ?? '', 'rate-before'));
  const after = rates(parseIpvsadmList(views['rate-after'] ?? '', 'rate-after'));
  const got = rates(reader);
  expect([...got.keys()].sort()).toEqual([...before.keys()].sort());
  for (const [key, v] of got) {
    const a = before.get(key)!;
    const b = after.get(key)!;
    expect(v, key).toBeGreaterThanOrEqual(Math.min(a, b));
    expect(v, key).toBeLessThanOrEqual(Math.max(a, b));
  }
}
