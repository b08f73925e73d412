// SourceHealth: what /metrics and the log see of each source's state.
import { Writable } from 'node:stream';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { SourceHealth } from '../../../src/source/health.js';

function logged(): { log: pino.Logger; lines: () => Record<string, unknown>[] } {
  const out: string[] = [];
  const sink = new Writable({ write: (c, _e, cb) => (out.push(String(c)), cb()) });
  return { log: pino({ level: 'info' }, sink), lines: () => out.map((l) => JSON.parse(l) as Record<string, unknown>) };
}

describe('SourceHealth', () => {
  it('counts failures and logs a state change once, not per failure', () => {
    const { log, lines } = logged();
    const h = new SourceHealth(log);
    h.up('nat');
    h.down('nat', 'iptables-save: exit 1');
    h.down('nat', 'iptables-save: exit 1');
    h.up('nat');
    expect(h.errors.nat).toBe(2);
    expect(lines().map((l) => l.msg)).toEqual(['source up', 'source down', 'source recovered']);
    expect(h.list()).toEqual([{ source: 'nat', up: true }]);
  });

  it('leaves an absent source (no IPVS on this node) out of the list, without errors, logged once', () => {
    const { log, lines } = logged();
    const h = new SourceHealth(log);
    h.up('conntrack');
    h.absent('ipvs', 'IPVS: not registered');
    h.absent('ipvs', 'IPVS: not registered');
    expect(h.list()).toEqual([{ source: 'conntrack', up: true }]);
    expect(h.errors.ipvs).toBeUndefined();
    expect(lines().filter((l) => l.msg === 'source not present on this node')).toHaveLength(1);
    // IPVS appearing later (kube-proxy switched to IPVS mode) makes it a normal source again.
    h.up('ipvs');
    expect(h.list()).toContainEqual({ source: 'ipvs', up: true });
  });

  it('an up source may be degraded: counted as up, its reason kept and logged once as a warning', () => {
    const { log, lines } = logged();
    const h = new SourceHealth(log);
    const why = 'counting with pcap (more CPU per packet): eBPF unavailable: blocked by seccomp';
    h.up('capture', why);
    h.up('capture', why);
    expect(h.list()).toEqual([{ source: 'capture', up: true }]);
    expect(h.reasonOf('capture')).toBe(why);
    expect(h.errors.capture).toBeUndefined();
    expect(lines().map((l) => [l.msg, l.level, l.reason])).toEqual([['source up, degraded', 40, why]]);
    // Back to full health: the reason goes, and nothing more is logged for an up source.
    h.up('capture');
    expect(h.reasonOf('capture')).toBeUndefined();
  });
});
