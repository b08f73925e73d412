import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { effectiveRpFilter, parseSysctl } from '../../../src/bundle/parse-sysctl.js';

const TEXT = join(import.meta.dirname, '../../fixtures/text');

describe('sysctl parser', () => {
  it('reads the captured netns settings', () => {
    const { value, warnings } = parseSysctl(readFileSync(join(TEXT, 'sysctl.txt'), 'utf8'), 'sysctl.txt');
    expect(warnings).toEqual([]);
    expect(value.rpFilter).toEqual({ all: 0, cni0: 0, default: 0, eth0: 2, 'kube-ipvs0': 0, lo: 0 });
    expect(value.routeLocalnet.all).toBe(1);
    expect(value.conntrack).toMatchObject({ acct: 1, events: 2, max: 262144, tcp_timeout_syn_sent: 120 });
    expect(value.raw['net.ipv4.conf.eth0.rp_filter']).toBe('2');
    expect(effectiveRpFilter(value, 'eth0')).toBe(2);
    expect(effectiveRpFilter(value, 'nope')).toBe(0);
  });

  it('keeps only the families it cares about from a whole `sysctl -a`, with VLAN names and procps complaints', () => {
    const text = [
      'kernel.hostname = node-a',
      'net.ipv4.conf.eth0/100.rp_filter = 1',
      'net.ipv4.conf.all.rp_filter = 2',
      'sysctl: permission denied on key "net.ipv6.conf.all.stable_secret"',
      'net.ipv4.tcp_rmem = 4096\t131072\t6291456',
      'net.netfilter.nf_conntrack_max = 1048576',
    ].join('\n');
    const { value, warnings } = parseSysctl(text, 's.txt');
    expect(warnings).toEqual([]);
    expect(value.rpFilter).toEqual({ 'eth0.100': 1, all: 2 });
    expect(effectiveRpFilter(value, 'eth0.100')).toBe(2);
    expect(Object.keys(value.raw)).toEqual([
      'net.ipv4.conf.eth0.100.rp_filter',
      'net.ipv4.conf.all.rp_filter',
      'net.netfilter.nf_conntrack_max',
    ]);
  });

  it('warns about malformed lines with file and line, and rejects a file with no sysctl line', () => {
    const { value, warnings } = parseSysctl(
      'net.ipv4.conf.all.rp_filter = 1\ngarbage here\nnet.ipv4.conf.lo.rp_filter = x\n',
      'b/sysctl.txt',
    );
    expect(value.rpFilter).toEqual({ all: 1 });
    expect(warnings).toEqual([
      'b/sysctl.txt:2: not "key = value": "garbage here"; line skipped',
      'b/sysctl.txt:3: rp_filter of lo is "x", not a number; ignored',
    ]);
    expect(() => parseSysctl('<html>\n', 'b/sysctl.txt')).toThrow(/^b\/sysctl\.txt:1: no "key = value" line/);
  });
});
