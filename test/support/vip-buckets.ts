// VIP keys that share a viptab bucket with a given one (the program's bucket is the key's
// filter bit, masked): tests use them to fill a bucket so that a key must be found through
// vips4/vips6 instead.
import { vipOf } from '../../src/capture/bpf-layout.js';
import { address16, PROTO_NUMBERS, type Proto } from '../../src/capture/targets.js';

/** The viptab bucket of a VIP:port, as the agent places it. */
export function vipBucket(address: string, port: number, proto: Proto): number {
  return vipOf(address16(address), !address.includes(':'), port, PROTO_NUMBERS[proto]).bucket;
}

/** `n` addresses of the same family, none equal to `address`, whose key (port, proto) lands in its bucket. */
export function bucketMates(address: string, port: number, proto: Proto, n: number): string[] {
  const want = vipBucket(address, port, proto);
  const v4 = !address.includes(':');
  const out: string[] = [];
  for (let i = 1; out.length < n && i < 1 << 24; i++) {
    const a = v4
      ? `10.${200 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`
      : `fd99::${(i >> 16).toString(16)}:${(i & 0xffff).toString(16)}`;
    if (a !== address && vipBucket(a, port, proto) === want) out.push(a);
  }
  if (out.length < n) throw new Error(`no ${n} bucket mates for ${address}`);
  return out;
}
