// IP address text forms; IPv6 follows RFC 5952 so addresses compare equal to what `ip`, `conntrack` and
// Kubernetes print.
import { isIP } from 'node:net';

export function formatIPv4(bytes: Uint8Array, off: number): string {
  return `${bytes[off]}.${bytes[off + 1]}.${bytes[off + 2]}.${bytes[off + 3]}`;
}

export function formatIPv6(bytes: Uint8Array, off: number): string {
  const g: number[] = new Array(8);
  for (let i = 0; i < 8; i++) g[i] = (bytes[off + 2 * i]! << 8) | bytes[off + 2 * i + 1]!;
  // ::ffff:a.b.c.d
  if (g[0] === 0 && g[1] === 0 && g[2] === 0 && g[3] === 0 && g[4] === 0 && g[5] === 0xffff) {
    return `::ffff:${formatIPv4(bytes, off + 12)}`;
  }
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = g.map((x) => x.toString(16));
  if (bestLen < 2) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

/** Formats 4 or 16 address bytes. */
export function formatIP(b: Uint8Array, off: number, len: number): string {
  if (len === 4) return formatIPv4(b, off);
  if (len === 16) return formatIPv6(b, off);
  throw new Error(`address of ${len} bytes`);
}

/** Address text → bytes (4 or 16); throws on anything that is not an IP. */
export function parseIP(s: string): Buffer {
  const v = isIP(s);
  if (v === 4) return Buffer.from(s.split('.').map(Number));
  // isIP takes a zone ("fe80::1%eth0", the zone may hold colons): no kernel table prints one.
  if (v !== 6 || s.includes('%')) throw new Error(`not an IP address: ${JSON.stringify(s)}`);
  let text = s;
  const out = Buffer.alloc(16);
  // Trailing dotted quad (::ffff:1.2.3.4).
  const dot = text.lastIndexOf('.');
  let tailV4: Buffer | undefined;
  if (dot >= 0) {
    const colon = text.lastIndexOf(':');
    tailV4 = parseIP(text.slice(colon + 1));
    text = `${text.slice(0, colon + 1)}0:0`;
  }
  const [left, right] = text.includes('::') ? text.split('::') : [text, undefined];
  const lg = left ? left.split(':') : [];
  const rg = right === undefined ? [] : right ? right.split(':') : [];
  const groups = right === undefined ? lg : [...lg, ...new Array<string>(8 - lg.length - rg.length).fill('0'), ...rg];
  for (const [i, h] of groups.entries()) out.writeUInt16BE(parseInt(h, 16), i * 2);
  if (tailV4) tailV4.copy(out, 12);
  return out;
}

/** Canonical text of any IP text form (e.g. '2001:DB8:0::1' → '2001:db8::1'). */
export function canonicalIP(s: string): string {
  const b = parseIP(s);
  return formatIP(b, 0, b.length);
}

export function ipFamily(s: string): 4 | 6 | 0 {
  return isIP(s) as 4 | 6 | 0;
}

/** Whether address (text) lies in cidr ('10.0.0.0/8', '2001:db8::/32'); throws on anything that is not a CIDR. */
export function inCidr(address: string, cidr: string): boolean {
  const slash = cidr.indexOf('/');
  const net = parseIP(slash < 0 ? cidr : cidr.slice(0, slash));
  const a = parseIP(address);
  if (a.length !== net.length) return false;
  const bitsText = slash < 0 ? undefined : cidr.slice(slash + 1);
  const bits = bitsText === undefined ? a.length * 8 : /^\d{1,3}$/.test(bitsText) ? Number(bitsText) : -1;
  // A prefix past the address (corrupt save output) is no CIDR, and would also run the byte loop below for ever.
  if (bits < 0 || bits > a.length * 8) throw new Error(`not a prefix length: ${JSON.stringify(cidr)}`);
  const full = bits >> 3;
  for (let i = 0; i < full; i++) if (a[i] !== net[i]) return false;
  const rem = bits & 7;
  if (rem === 0) return true;
  const mask = (0xff << (8 - rem)) & 0xff;
  return (a[full]! & mask) === (net[full]! & mask);
}

/** inCidr for ruleset CIDRs: an invalid one matches nothing, since netfilter could never have loaded it. */
export function inCidrSafe(address: string, cidr: string): boolean {
  try {
    return inCidr(address, cidr);
  } catch {
    return false;
  }
}

export { ipv4Number } from '../model/ip.js';

import { ipv4Number } from '../model/ip.js';

/** A membership test over CIDRs parsed once, for per-entry use; malformed CIDRs match nothing and are in `invalid`. */
export function cidrMatcher(cidrs: readonly string[]): { has(ip: string): boolean; invalid: string[] } {
  const v4: { net: number; mask: number }[] = [];
  const v6: string[] = [];
  const invalid: string[] = [];
  for (const c of cidrs) {
    const slash = c.indexOf('/');
    const addr = slash < 0 ? c : c.slice(0, slash);
    const bitsText = slash < 0 ? undefined : c.slice(slash + 1);
    const fam = ipFamily(addr);
    const bits = bitsText === undefined ? (fam === 4 ? 32 : 128) : /^\d{1,3}$/.test(bitsText) ? Number(bitsText) : -1;
    if (fam === 0 || bits < 0 || bits > (fam === 4 ? 32 : 128)) invalid.push(c);
    else if (fam === 6) v6.push(c);
    else {
      // 2 ** (32 - bits) keeps the arithmetic in safe integers (no 32-bit shift overflow at /0).
      const size = 2 ** (32 - bits);
      v4.push({ net: ipv4Number(addr)! - (ipv4Number(addr)! % size), mask: size });
    }
  }
  return {
    invalid,
    has(ip: string): boolean {
      const n = ipv4Number(ip);
      if (n !== undefined) return v4.some((c) => n - (n % c.mask) === c.net);
      return v6.length > 0 && ipFamily(ip) === 6 && v6.some((c) => inCidr(ip, c));
    },
  };
}
