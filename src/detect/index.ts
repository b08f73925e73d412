// diagnose(): every detector over one node + cluster view, most severe first; conntrack is streamed through the
// correlator. Pure: the CLI does all reading.

import type { LbServiceIndex } from '../cluster/lb-index.js';
import type { ServiceView } from '../cluster/types.js';
import { byText } from '../compare.js';
import type { ConntrackEntry } from '../kernel/types.js';
import { portKey } from '../model/service.js';
import { buildContext, type DetectContext } from './context.js';
import { ConntrackCorrelator, type Observations, type ObsGroup } from './correlator.js';
import { DETECTORS, MECHANISM_RANK, OBSERVED_KINDS } from './list.js';
import type { DiagnoseInput, DiagnoseResult, Finding, Severity } from './types.js';

export const SEVERITY_RANK: Record<Severity, number> = { active: 0, risk: 1, info: 2 };

export function compareFindings(a: Finding, b: Finding): number {
  return (
    SEVERITY_RANK[a.severity] - SEVERITY_RANK[b.severity] ||
    MECHANISM_RANK[a.mechanism] - MECHANISM_RANK[b.mechanism] ||
    byText(a.service.namespace, b.service.namespace) ||
    byText(a.service.name, b.service.name) ||
    a.port.port - b.port.port
  );
}

function runDetectors(ctx: DetectContext, obs: Observations, significantOnly: boolean): Finding[] {
  const out: Finding[] = [];
  let byPort: Map<string, ServiceView> | undefined;
  for (const d of DETECTORS) {
    if (significantOnly && d.contextOnly) continue;
    for (const f of d.detect(ctx, obs)) {
      if (significantOnly && f.severity === 'info') continue;
      if (d.changes && f.severity !== 'info') {
        byPort ??= new Map(ctx.services.map((s) => [portKey(s, s.protocol, s.port), s]));
        const s = byPort.get(portKey(f.service, f.port.protocol, f.port.port));
        const fixes = s ? d.changes(s, ctx) : [];
        if (fixes.length > 0) f.fixes = fixes;
      }
      out.push(f);
    }
  }
  return out.sort(compareFindings);
}

function warningsOf(input: DiagnoseInput, obs: Observations, conntrackRead: boolean): string[] {
  const w = [...input.warnings, ...input.cluster.warnings];
  if (!input.cluster.fresh)
    w.push(`cluster view is stale${input.cluster.staleReason ? `: ${input.cluster.staleReason}` : ''}`);
  if (!conntrackRead)
    w.push('no conntrack entries read: only configuration risks can be reported, nothing can be shown active');
  if (obs.overflowed > 0)
    w.push(`conntrack correlation incomplete: ${obs.overflowed} relevant entries not kept (pending-entry cap reached)`);
  for (const s of input.node.sources) if (!s.available) w.push(`${s.source} not read: ${s.reason ?? 'unavailable'}`);
  return w;
}

type BaseInput = Omit<DiagnoseInput, 'conntrack'>;

/** The diagnosis part from snapshot and view only, reused by the agent for conntrack-only re-diagnoses. */
export interface PreparedDiagnosis {
  readonly input: BaseInput;
  readonly ctx: DetectContext;
}

/** `lb`: the LB-Service index of input.cluster, when the caller has built one (the agent); built here otherwise. */
export function prepareDiagnosis(input: BaseInput, lb?: LbServiceIndex): PreparedDiagnosis {
  return { input, ctx: buildContext(input, lb) };
}

/** A diagnosis fed entry by entry; the correlator keeps only the entries that matter. */
export class Diagnosis {
  private readonly prepared: PreparedDiagnosis;
  private readonly corr: ConntrackCorrelator;
  private conntrackRead = false;

  constructor(input: BaseInput | PreparedDiagnosis) {
    this.prepared = 'ctx' in input ? input : prepareDiagnosis(input);
    this.corr = new ConntrackCorrelator(this.prepared.ctx, OBSERVED_KINDS);
  }

  /** Marks conntrack as read even if the table was empty. */
  conntrackSeen(): void {
    this.conntrackRead = true;
  }

  add(entry: ConntrackEntry): void {
    this.conntrackRead = true;
    this.corr.add(entry);
  }

  /** What the conntrack entries showed, per Service port; ends the stream. */
  observations(): Observations {
    return this.corr.observations();
  }

  /** With `only`, just those ports (others' findings still hold); `significantOnly` leaves info findings out. */
  finish({ only, significantOnly = false }: { only?: ReadonlySet<ServiceView>; significantOnly?: boolean } = {}) {
    const { ctx, input } = this.prepared;
    const obs = this.corr.observations();
    const findings = only
      ? runDetectors(
          { ...ctx, services: ctx.services.filter((s) => only.has(s)) },
          { ...obs, groups: obs.groups.filter((g) => only.has(g.svc)) },
          significantOnly,
        )
      : runDetectors(ctx, obs, significantOnly);
    return { findings, warnings: warningsOf(input, obs, this.conntrackRead) };
  }
}

/** Ports whose observations differ between two diagnoses on one prepared input; entries compare by identity. */
export function changedServices(before: Observations, after: Observations): Set<ServiceView> {
  const a = groupsByService(before);
  const b = groupsByService(after);
  const changed = new Set<ServiceView>();
  for (const svc of new Set([...a.keys(), ...b.keys()])) if (!sameGroups(a.get(svc), b.get(svc))) changed.add(svc);
  return changed;
}

function groupsByService(observations: Observations): Map<ServiceView, ObsGroup[]> {
  const m = new Map<ServiceView, ObsGroup[]>();
  for (const g of observations.groups) {
    const list = m.get(g.svc);
    if (list) list.push(g);
    else m.set(g.svc, [g]);
  }
  return m;
}

function sameGroups(x: ObsGroup[] | undefined, y: ObsGroup[] | undefined): boolean {
  if (!x || !y || x.length !== y.length) return false;
  return x.every((g, i) => {
    const h = y[i]!;
    return (
      g.kind === h.kind &&
      g.count === h.count &&
      g.examples.length === h.examples.length &&
      g.examples.every((ex, j) => ex.length === h.examples[j]!.length && ex.every((e, k) => e === h.examples[j]![k]))
    );
  });
}

/** Diagnosis over entries already at hand (an array or a generator). */
export function diagnose(input: DiagnoseInput): DiagnoseResult {
  const d = new Diagnosis(input);
  if (input.conntrack) d.conntrackSeen();
  for (const e of input.conntrack ?? []) d.add(e);
  return d.finish();
}

export function hasActive(findings: Finding[]): boolean {
  return findings.some((f) => f.severity === 'active');
}

export type { DiagnoseInput, DiagnoseResult, Finding } from './types.js';
