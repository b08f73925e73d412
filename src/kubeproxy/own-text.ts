// Strings the NAT facts keep, copied flat (a V8 substring keeps its whole parent line alive) and
// shared between facts (many facts quote the same evidence line). A table lives for one read.

/** Protocols as constants: thousands of facts hold one of these. */
const PROTOCOLS = new Map(['tcp', 'udp', 'sctp'].map((p) => [p, p] as const));

export class OwnText {
  private readonly seen = new Map<string, string>();

  /** `s`, flat and shared: the string this table returned before for the same text, or a copy. */
  own(s: string): string {
    const had = this.seen.get(s);
    if (had !== undefined) return had;
    const copy = flatCopy(s);
    this.seen.set(copy, copy);
    return copy;
  }

  /**
   * The parts joined, flat and shared. Not a template literal: that is a tree of its parts, each
   * kept alive (a rule's spec, and with it its whole save-output line). A join of two or more
   * non-empty parts is already a new flat string, so it is kept as it is, not copied again.
   */
  join(...parts: string[]): string {
    const s = parts.join('');
    const had = this.seen.get(s);
    if (had !== undefined) return had;
    const flat = parts.filter((p) => p.length > 0).length > 1 ? s : flatCopy(s);
    this.seen.set(flat, flat);
    return flat;
  }

  /** A protocol name lower-cased: tcp, udp and sctp as constants, others owned. */
  protocol(p: string): string {
    const lower = p.toLowerCase();
    return PROTOCOLS.get(lower) ?? this.own(lower);
  }
}

/**
 * A copy of `s` that refers to nothing else. Array#join of one part, String#concat with '' and
 * the like return `s` itself (still a slice); joining two non-empty parts writes a new string.
 */
export function flatCopy(s: string): string {
  return s.length < 2 ? s : [s.slice(0, 1), s.slice(1)].join('');
}
