// The capture source's health from what the counters say (src/agent/capture-health.ts); what a
// scrape shows when the counters stop or fail a read is in test/unit/export/metrics.test.ts.
import { describe, expect, it } from 'vitest';
import { CaptureHealth } from '../../../src/agent/capture-health.js';
import { SourceHealth } from '../../../src/source/health.js';

const GONE = 'eBPF counters on eth0 stopped: the interface was deleted (ifindex 2); packets are not counted since';
const state = (h: SourceHealth) => ({
  up: h.list().find((s) => s.source === 'capture')?.up,
  reason: h.reasonOf('capture'),
});

describe('CaptureHealth', () => {
  it('goes down while the counters count nothing and up again, with its notes, when they count again', () => {
    const h = new SourceHealth();
    const c = new CaptureHealth(h);
    c.applied('eBPF unavailable: using pcap', undefined);
    c.read(undefined);
    expect(state(h)).toEqual({ up: true, reason: 'eBPF unavailable: using pcap' });
    c.read(GONE);
    c.read(GONE);
    expect(state(h)).toEqual({ up: false, reason: GONE });
    expect(h.errors.capture).toBe(2);
    c.applied(undefined, GONE); // a target change while stopped: still down
    expect(state(h)).toEqual({ up: false, reason: GONE });
    c.read(undefined); // re-attached
    expect(state(h)).toEqual({ up: true, reason: undefined });
  });

  it('leaves the source down when something else put it down since', () => {
    const h = new SourceHealth();
    const c = new CaptureHealth(h);
    c.applied(undefined, undefined);
    c.read('reading counters: EIO');
    h.down('capture', 'updating targets: ENOMEM');
    c.read(undefined);
    expect(state(h)).toEqual({ up: false, reason: 'updating targets: ENOMEM' });
  });
});
