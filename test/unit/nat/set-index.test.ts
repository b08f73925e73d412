// The walk's ipset lookups (walk.ts setMatch): members that can equal only one probe are found by
// key, the rest compared one by one; the answer must be what comparing every member gives.

import { describe, expect, it } from 'vitest';
import { parseIpsetSave } from '../../../src/kernel/nat/ipset.js';
import { parseIptablesSave } from '../../../src/kernel/nat/iptables-save.js';
import { NatRules } from '../../../src/kernel/nat/nat-rules.js';
import { FILTER_DROP_CHAINS } from '../../../src/kubeproxy/facts.js';
import { type Tri, walkNat } from '../../../src/kubeproxy/walk.js';

const SETS = parseIpsetSave(
  [
    'create LB hash:ip,port family inet',
    'add LB 192.0.2.1,tcp:80',
    'add LB 192.0.2.1,UDP:053',
    'create NET hash:net,port family inet',
    'add NET 198.51.100.0/24,tcp:443',
    'create RANGE hash:ip,port family inet',
    'add RANGE 192.0.2.9,tcp:8000-8100',
    'create PORTS bitmap:port range 0-65535',
    'add PORTS 31080',
    'create SRC hash:ip,port,net family inet',
    'add SRC 192.0.2.1,tcp:80,10.244.1.0/24',
  ].join('\n'),
  'sets',
).sets;

/** Whether a walk of a one-rule chain matching `set` with `flags` finds the probe in it. */
function lookup(set: string, flags: string, dst: string, protocol: string, dport: number): Tri {
  const text = `*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -m set --match-set ${set} ${flags} -j ACCEPT\nCOMMIT\n`;
  const chains = NatRules.ofDump(parseIptablesSave(text, { source: 't', family: 4 }), FILTER_DROP_CHAINS);
  const walk = walkNat(
    { chains, sets: new Map(SETS.map((s) => [s.name, s])), pod: { cidrs: ['10.244.0.0/16'], interfaces: [] } },
    'KUBE-SERVICES',
    { dst, protocol, dport },
  );
  return walk.lookups[0]!.result;
}

describe('ipset lookups in the walk', () => {
  it('exact members by key: address, protocol (any case) and port (any spelling), and bare ports for any protocol', () => {
    expect(lookup('LB', 'dst,dst', '192.0.2.1', 'tcp', 80)).toBe('yes');
    expect(lookup('LB', 'dst,dst', '192.0.2.1', 'udp', 80)).toBe('no');
    expect(lookup('LB', 'dst,dst', '192.0.2.1', 'udp', 53)).toBe('yes');
    expect(lookup('LB', 'dst,dst', '192.0.2.2', 'tcp', 80)).toBe('no');
    expect(lookup('PORTS', 'dst', '192.0.2.1', 'udp', 31080)).toBe('yes');
    expect(lookup('PORTS', 'dst', '192.0.2.1', 'tcp', 31081)).toBe('no');
  });

  it('the other members one by one: networks, port ranges, source parts', () => {
    expect(lookup('NET', 'dst,dst', '198.51.100.7', 'tcp', 443)).toBe('yes');
    expect(lookup('NET', 'dst,dst', '198.51.101.7', 'tcp', 443)).toBe('no');
    expect(lookup('RANGE', 'dst,dst', '192.0.2.9', 'tcp', 8050)).toBe('yes');
    expect(lookup('RANGE', 'dst,dst', '192.0.2.9', 'tcp', 8101)).toBe('no');
    // The source part is part of the pod range: it may or may not hold the client.
    expect(lookup('SRC', 'dst,dst,src', '192.0.2.1', 'tcp', 80)).toBe('maybe');
    expect(lookup('SRC', 'dst,dst,src', '192.0.2.1', 'tcp', 81)).toBe('no');
  });
});
