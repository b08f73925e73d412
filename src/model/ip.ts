// IPv4 text to number, for the address keys (model/address-key.ts) and the CIDR tests of src/kernel/ip.ts.

/** Dotted-quad text → 32-bit number; undefined for anything else. No allocation (hot paths). */
export function ipv4Number(text: string): number | undefined {
  let n = 0;
  let octet = -1;
  let dots = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 46) {
      if (octet < 0 || ++dots > 3) return undefined;
      n = n * 256 + octet;
      octet = -1;
    } else if (c >= 48 && c <= 57) {
      octet = octet < 0 ? c - 48 : octet * 10 + (c - 48);
      if (octet > 255) return undefined;
    } else return undefined;
  }
  return dots === 3 && octet >= 0 ? n * 256 + octet : undefined;
}
