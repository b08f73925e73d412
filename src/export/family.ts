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

/** What a per-Service family asks of the cap: a Service port's label text, or null when it is over the cap. */
export interface ServicePortLabelText {
  labels(s: SvcPortLabels): string | null;
}

/** One metric family bound to a registry: how its samples come out of the state. */
export interface Family<S, T> {
  name: string;
  help: string;
  type: FamilyType;
  labelNames: string[];
  items(state: S): readonly T[];
  /** The Service port's label text (cached, so cheap to look up), '' for families without one; null skips the item. */
  group(x: T): string | null;
  /** What tells the item's label set apart within its group (its other label values). */
  key(x: T): string;
  /** The item's full label text; only computed when the family is formatted again. */
  labels(x: T): string;
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
  bind(cap: ServicePortLabelText): Family<S, unknown>;
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
        group: (x: T) => cap.labels(x.svc),
        key: extra.length === 1 ? first![1] : (x: T) => extra.map(([, v]) => v(x)).join('\0'),
        labels: (x: T) => [cap.labels(x.svc), ...extra.map(([n, v]) => label(n, v(x)))].join(','),
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
  const family = { ...f, group: () => '' } satisfies Family<S, T> as Family<S, unknown>;
  return { name: f.name, help: f.help, type: f.type, labelNames: f.labelNames, bind: () => family };
}
