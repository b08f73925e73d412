// How a metric family is declared: its name, help, type and labels, and how
// its samples come out of a state object. A collector (src/agent/metrics/)
// declares its families with these builders next to the code that fills its
// part of the state; the registry (metrics.ts) renders them. A per-Service
// family says which items carry a Service port, so the cardinality cap's list
// is the per-Service families themselves, never a list kept by hand.
import type { SvcPortLabels } from './state.js';

export type FamilyType = 'counter' | 'gauge';

/** The per-Service labels, in this order, before a family's own. */
export const SVC_LABELS = ['namespace', 'service', 'port', 'protocol'] as const;

/** As prom-client escapes: HELP text and label values (most values need nothing: test first, it is cheaper). */
export const escapeHelp = (s: string): string => s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
const escapeValue = (s: string): string => (/[\\\n"]/.test(s) ? escapeHelp(s).replace(/"/g, '\\"') : s);
export const label = (name: string, value: string): string => `${name}="${escapeValue(value)}"`;

/**
 * The label text a family's samples share (a Service port's, or '' for families without one), with
 * a 64-bit hash of it in two 32-bit halves, computed once: a kept chunk of /metrics is told apart
 * from the next scrape's samples by a hash of their label sets (family-renderer.ts). One class for
 * every group, so that the render loop reads them through one shape.
 */
export class Group {
  readonly h1: number;
  readonly h2: number;
  /** The cardinality cap's count of Service ports: the count that last saw this group (metrics.ts). */
  mark = 0;
  /** The cap's decision that last saw this group, and whether it left the group out (metrics.ts). */
  decision = 0;
  over = false;
  constructor(readonly text: string) {
    [this.h1, this.h2] = hashPair(text);
  }
}

/**
 * Two 32-bit hashes of a string (FNV-1a with different offsets and primes, each finished by
 * murmur3's fmix32): together 64 bits, so that two of the ~10k label texts of a node colliding
 * is ~2^-40 likely rather than the ~1 % of one 32-bit hash.
 */
export function hashPair(s: string): [number, number] {
  let a = 0x811c9dc5;
  let b = 0x2b9a8c4d;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
  }
  return [fmix32(a), fmix32(b)];
}

export function fmix32(h: number): number {
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) | 0;
}

/** The group of every sample of a family without Service ports. */
export const NO_GROUP = new Group('');

/** What a per-Service family asks of the cap: a Service port's group (cached), or null when it is over the cap. */
export interface ServicePortGroups {
  group(s: SvcPortLabels): Group | null;
}

/** One metric family bound to a registry: how its samples come out of the state. */
export interface Family<S, T> {
  name: string;
  help: string;
  type: FamilyType;
  labelNames: string[];
  items(state: S): readonly T[];
  /** The Service port's group (cached, so cheap to look up), NO_GROUP for families without one; null skips the item. */
  group(x: T): Group | null;
  /** What tells the item's label set apart within its group (its other label values). */
  key(x: T): string;
  /** The item's full label text, given its group; only computed when a chunk is formatted again. */
  labels(x: T, g: Group): string;
  value(x: T): number;
}

/** A family as a collector declares it, before a registry binds it to its cardinality cap. */
export interface FamilyDecl<S> {
  readonly name: string;
  readonly help: string;
  readonly type: FamilyType;
  readonly labelNames: readonly string[];
  /** Per-Service families only: the items that carry a Service port (what the cap counts). */
  readonly servicePorts?: (state: S) => readonly { svc: SvcPortLabels }[];
  bind(cap: ServicePortGroups): Family<S, unknown>;
}

interface Head {
  name: string;
  help: string;
  type: FamilyType;
}

/**
 * A per-Service family: one series per item whose Service port is under the cap, labelled with
 * the Service port and the family's own labels (`extra`, each a name and how to read it).
 */
export function perServicePort<S, T extends { svc: SvcPortLabels }>(
  head: Head & {
    items: (s: S) => readonly T[];
    extra: readonly (readonly [string, (x: T) => string])[];
    value: (x: T) => number;
  },
): FamilyDecl<S> {
  const { items, extra, value } = head;
  const [first] = extra;
  return {
    name: head.name,
    help: head.help,
    type: head.type,
    labelNames: [...SVC_LABELS, ...extra.map(([n]) => n)],
    servicePorts: items,
    bind: (cap) =>
      ({
        name: head.name,
        help: head.help,
        type: head.type,
        labelNames: [...SVC_LABELS, ...extra.map(([n]) => n)],
        items,
        group: (x: T) => cap.group(x.svc),
        key: extra.length === 1 ? first![1] : (x: T) => extra.map(([, v]) => v(x)).join('\0'),
        labels: (x: T, g: Group) => {
          // Appended in place, not an array spread and joined: this runs for every sample of a
          // chunk formatted again (50k at the first scrape of 5,000 Services).
          let text = g.text;
          for (let i = 0; i < extra.length; i++) text += `,${label(extra[i]![0], extra[i]![1](x))}`;
          return text;
        },
        value,
      }) satisfies Family<S, T> as Family<S, unknown>,
  };
}

/** A family with only a `source` label, one series per entry of a record. */
export function perSource<S>(head: Head & { counts: (s: S) => Record<string, number> }): FamilyDecl<S> {
  const { counts } = head;
  return plain<S, [string, number]>({
    name: head.name,
    help: head.help,
    type: head.type,
    labelNames: ['source'],
    items: (s) => Object.entries(counts(s)),
    key: ([source]) => source,
    labels: ([source]) => label('source', source),
    value: ([, n]) => n,
  });
}

/** A family without Service ports: its items, their label set (key) and label text. */
export function plain<S, T>(f: Head & { labelNames: string[]; items: (s: S) => readonly T[]; key(x: T): string; labels(x: T): string; value(x: T): number }): FamilyDecl<S> {
  const family = { ...f, group: () => NO_GROUP } satisfies Family<S, T> as Family<S, unknown>;
  return { name: f.name, help: f.help, type: f.type, labelNames: f.labelNames, bind: () => family };
}
