// kube-proxy's chain-name hash: the leading base32 characters of the SHA-256 of
// a name (16 for the iptables proxier's KUBE-SVC-/KUBE-SEP- chains, 8 for the
// nftables proxier's service and endpoint chains). Shared by the rule
// generators of the tests and the benches, so their names agree with kube-proxy's.
import { createHash } from 'node:crypto';

const BASE32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';

export function kubeProxyHash(text: string, chars: number): string {
  let bits = 0;
  let acc = 0;
  let out = '';
  for (const b of createHash('sha256').update(text).digest()) {
    acc = ((acc << 8) | b) & 0xffff; // at most 12 unread bits are ever pending
    bits += 8;
    while (bits >= 5 && out.length < chars) {
      out += BASE32[(acc >> (bits - 5)) & 31];
      bits -= 5;
    }
    if (out.length >= chars) break;
  }
  return out;
}
