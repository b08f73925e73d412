// A kept chunk is told apart from the next scrape's samples by its values
// (exactly) and a hash of its label sets: every change of labels that leaves
// the count and the values as they were must still format the chunk again.
import { describe, expect, it } from 'vitest';
import { perServicePort } from '../../../src/export/family.js';
import { createFamilyRegistry } from '../../../src/export/metrics.js';
import type { SvcPortLabels } from '../../../src/export/state.js';

type Item = { svc: SvcPortLabels; state: string; count: number };
interface State {
  items: Item[];
}

const family = perServicePort<State, Item>({
  name: 'test_entries',
  help: 'Entries of a Service port, by state.',
  type: 'gauge',
  items: (s) => s.items,
  extra: [['state', (x) => x.state]],
  value: (x) => x.count,
});

const svc = (name: string): SvcPortLabels => ({ namespace: 'ns', service: name, port: '80', protocol: 'TCP' });

describe('FamilyRenderer', () => {
  it('formats a chunk again when its label sets change but not its sample count or values', async () => {
    const svcs = Array.from({ length: 700 }, (_, i) => svc(`s${String(i).padStart(3, '0')}`));
    const s: State = { items: svcs.map((x) => ({ svc: x, state: 'ESTABLISHED', count: 0 })) };
    const opts = { maxServicePorts: 10_000, processMetrics: false };
    const reg = createFamilyRegistry([family], () => s, opts);
    const fresh = () => createFamilyRegistry([family], () => s, opts).metrics();
    const steps: [string, () => void][] = [
      ['first scrape', () => {}],
      ['a Service replaced by one of the same name length', () => (s.items[300] = { svc: svc('t300'), state: 'ESTABLISHED', count: 0 })],
      ['two samples trade places', () => ([s.items[10], s.items[11]] = [s.items[11]!, s.items[10]!])],
      ['a key changes', () => (s.items[600]!.state = 'TIME_WAIT')],
      ['group and key trade parts', () => (s.items[5] = { svc: svc('s006'), state: 'ESTABLISHED', count: 0 })],
      ['a value changes in the last chunk', () => (s.items[699]!.count = 4)],
      ['one more sample at the end', () => s.items.push({ svc: svc('z'), state: 'ESTABLISHED', count: 0 })],
      ['a sample moves from one chunk to the next', () => s.items.splice(256, 0, s.items.splice(255, 1)[0]!, s.items.splice(1, 1)[0]!)],
      ['a value NaN', () => (s.items[3]!.count = NaN)],
    ];
    for (const [what, change] of steps) {
      change();
      expect(await reg.metrics(), what).toBe(await fresh());
    }
    expect(await reg.metrics()).toContain(`test_entries{namespace="ns",service="${s.items[3]!.svc.service}",port="80",protocol="TCP",state="ESTABLISHED"} Nan\n`);
  });

  it('leaves out, and brings back, the samples of a Service port the cap drops or admits again', async () => {
    const s: State = { items: [svc('b'), svc('a'), svc('c')].map((x) => ({ svc: x, state: 'SYN_SENT', count: 1 })) };
    const reg = createFamilyRegistry([family], () => s, { maxServicePorts: 2, processMetrics: false });
    expect(await reg.metrics()).not.toContain('service="c"');
    s.items = s.items.filter((x) => x.svc.service !== 'a');
    const text = await reg.metrics();
    expect(text).toContain('service="c"');
    expect(text).toContain('service="b"');
  });
});
