// Strings the NAT facts keep, copied flat (a V8 substring keeps its whole parent line alive) and
// shared between facts (many facts quote the same evidence line). A table lives for one read.

/** Protocols as constants: thousands of facts hold one of these. */
const PROTOCOLS = new Map(['tcp', 'udp', 'sctp'].map((p) => [p, p] as const));

export class OwnText {
  private readonly seen = new Map<string, string>();

  /** `s`, flat and shared: the string this table returned before for the same text, or a copy. */
  own(s: string): string {
    return this.seen.get(s) ?? this.keep(flatCopy(s));
  }

  /** The parts joined flat and shared, not as a template literal, whose tree would keep each part's line alive. */
  join(...parts: string[]): string {
    const s = parts.join('');
    return this.seen.get(s) ?? this.keep(parts.filter((p) => p.length > 0).length > 1 ? s : flatCopy(s));
  }

  private keep(flat: string): string {
    this.seen.set(flat, flat);
    return flat;
  }

  /** A protocol name lower-cased: tcp, udp and sctp as constants, others owned. */
  protocol(p: string): string {
    const lower = p.toLowerCase();
    return PROTOCOLS.get(lower) ?? this.own(lower);
  }
}

/** A copy of `s` referring to nothing else; join of one part or concat with '' would return the slice itself. */
export function flatCopy(s: string): string {
  return s.length < 2 ? s : [s.slice(0, 1), s.slice(1)].join('');
}
