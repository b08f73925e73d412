// The identities of VIP keys and counter keys (src/capture/bpf-layout.ts): each gives back the
// exact bytes the program uses, and distinct keys get distinct identities (so no two keys share a
// slot or a table entry).
import { describe, expect, it } from 'vitest';
import {
  addressWord,
  COUNTER_KEY_SIZE,
  counterIdOf,
  counterKey,
  decodeCounterKey,
  filterBit,
  isVip4,
  nodePortCounterId,
  textBytes,
  vipEntry,
  vipEntryOf,
  vipKey16,
  vipOf,
  vipParts,
} from '../../../src/capture/bpf-layout.js';
import { address16, type CounterKind, type Direction } from '../../../src/capture/targets.js';

const ADDRS = [
  '0.0.0.0',
  '10.0.0.1',
  '255.255.255.255',
  '192.0.2.7',
  '::',
  '2001:db8::1',
  'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
  '::ffff:0:1',
];
const PORTS = [0, 1, 80, 65535];
const PROTOS = [6, 17, 132];

describe('VIP keys', () => {
  it('round-trip to the vip4_key / vip6_key bytes, filter bit and entry the program uses', () => {
    const seen = new Set<string>();
    for (const a of ADDRS) {
      const a16 = address16(a);
      const v4 = !a.includes(':');
      for (const port of PORTS) {
        for (const proto of PROTOS) {
          const vip = vipOf(a16, v4, port, proto);
          const k = vip.key;
          expect(isVip4(k)).toBe(v4);
          expect(textBytes(k).equals(vipKey16(a16, v4, port, proto)), `${a} ${port} ${proto}`).toBe(true);
          expect(vipParts(k)).toEqual({ addr16: a16, v4, port, proto });
          expect(vip.bucket).toBe(filterBit(addressWord(a16, v4), port, proto));
          expect(vip.counterId).toBe(counterIdOf(counterKey(a16, port, proto, 'to_lb', 'egress')));
          expect(vipEntryOf(k, 77).equals(vipEntry(a16, v4, port, proto, 77))).toBe(true);
          seen.add(k);
        }
      }
    }
    expect(seen.size).toBe(ADDRS.length * PORTS.length * PROTOS.length);
  });

  it('keeps an IPv4 key of any protocol as its bytes', () => {
    const a16 = address16('10.0.0.1');
    const k = vipOf(a16, true, 80, 1 /* ICMP */).key;
    expect(k).toBe(vipKey16(a16, true, 80, 1).toString('latin1'));
    expect(isVip4(k)).toBe(true);
    expect(vipParts(k)).toEqual({ addr16: a16, v4: true, port: 80, proto: 1 });
  });

  it('refuses text that is no VIP key', () => {
    expect(() => vipParts('abc')).toThrow(/not a VIP key/);
    expect(() => textBytes('')).not.toThrow(); // a text key is written as it is...
    expect(() => vipEntryOf('x'.repeat(21), 1)).toThrow(/not a VIP key/); // ...but never parsed as one
  });
});

describe('counter ids', () => {
  const KINDS: [CounterKind, Direction][] = [
    ['to_lb', 'egress'],
    ['to_lb', 'ingress'],
    ['loop_return', 'ingress'],
    ['loop_return', 'egress'],
    ['hc_local_src', 'ingress'],
    ['hc_local_src', 'egress'],
  ];

  it('round-trip to the struct ctr_key, one id per key', () => {
    const seen = new Set<string>();
    for (const a of ADDRS) {
      for (const port of PORTS) {
        for (const proto of PROTOS) {
          for (const [kind, dir] of KINDS) {
            const key = counterKey(address16(a), port, proto, kind, dir);
            const id = counterIdOf(key);
            expect(textBytes(id).equals(key), `${a} ${port} ${proto} ${kind} ${dir}`).toBe(true);
            seen.add(id);
          }
        }
      }
    }
    // '::ffff:0:1' is 0.0.0.1, no other address: every other key has its own id.
    expect(seen.size).toBe(ADDRS.length * PORTS.length * PROTOS.length * KINDS.length);
  });

  it('a VIP entry counts to_lb egress of its VIP; a NodePort loop_return ingress of the any address', () => {
    for (const a of ['10.0.0.1', '2001:db8::1']) {
      const { counterId } = vipOf(address16(a), !a.includes(':'), 443, 17);
      expect(decodeCounterKey(textBytes(counterId), 0)).toEqual({
        target: a,
        port: 443,
        proto: 'udp',
        kind: 'to_lb',
        direction: 'egress',
      });
    }
    expect(decodeCounterKey(textBytes(nodePortCounterId(30080, 132, false)), 0)).toEqual({
      target: '0.0.0.0',
      port: 30080,
      proto: 'sctp',
      kind: 'loop_return',
      direction: 'ingress',
    });
    expect(decodeCounterKey(textBytes(nodePortCounterId(30080, 6, true)), 0)).toEqual({
      target: '::',
      port: 30080,
      proto: 'tcp',
      kind: 'loop_return',
      direction: 'ingress',
    });
    // Any protocol: the key's bytes as text.
    expect(nodePortCounterId(30080, 1, true)).toBe(
      counterKey(Buffer.alloc(16), 30080, 1, 'loop_return', 'ingress').toString('latin1'),
    );
  });

  it('keeps keys the program never writes as their bytes (unknown kind, direction, padding), and refuses a wrong size', () => {
    const key = counterKey(address16('10.0.0.1'), 80, 6, 'to_lb', 'egress');
    for (const [at, value] of [
      [19, 9],
      [20, 2],
      [23, 1],
    ] as const) {
      const odd = Buffer.from(key);
      odd[at] = value;
      expect(counterIdOf(odd)).toBe(odd.toString('latin1'));
      expect(textBytes(counterIdOf(odd)).equals(odd)).toBe(true);
    }
    expect(() => counterIdOf(Buffer.alloc(COUNTER_KEY_SIZE - 1))).toThrow(/23 bytes/);
  });
});
