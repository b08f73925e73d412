// The incremental diagnosis: a snapshot or view change re-diagnoses every Service port, a conntrack change only
// the ports whose observations changed; appearing and clearing findings are logged.
import type { Observations } from '../detect/correlator.js';
import { changedServices, compareFindings, Diagnosis, type PreparedDiagnosis } from '../detect/index.js';
import type { Finding } from '../detect/types.js';
import { errText } from '../errors.js';
import type { Logger } from '../log.js';
import { portKey } from '../model/service.js';
import type { KeptEntry } from './conntrack-table.js';

export class IncrementalDiagnosis {
  /** The significant findings (not info) as published: a new array whenever they change. */
  findings: readonly Finding[] = [];
  /** The significant findings of `lastObs`: the published ones, or prime()'s until the next run() publishes. */
  private current: readonly Finding[] = [];
  /** The snapshot-and-cluster half of the diagnosis, reused while only conntrack changes; undefined = stale. */
  private prepared?: PreparedDiagnosis;
  /** The observations behind `current`, to re-diagnose only the Service ports whose observations changed. */
  private lastObs?: Observations;

  constructor(private readonly log: Logger) {}

  /** The snapshot or the cluster view changed: the next run diagnoses every Service port. */
  stale(): void {
    this.prepared = undefined;
  }

  /** Diagnoses every port as if no entry were kept, unpublished, so the full pass comes before the first dump. */
  prime(prepare: () => PreparedDiagnosis): void {
    this.diagnose(prepare, []);
  }

  /** Runs the detectors on kept entries; `prepare` only when stale. */
  run(prepare: () => PreparedDiagnosis, entries: Iterable<KeptEntry>): void {
    this.diagnose(prepare, entries);
    if (this.current === this.findings) return;
    this.logChanges(this.current);
    this.findings = this.current;
  }

  private diagnose(prepare: () => PreparedDiagnosis, entries: Iterable<KeptEntry>): void {
    try {
      // Observations of an earlier prepared input say nothing about what changed since.
      const before = this.prepared ? this.lastObs : undefined;
      if (!this.prepared) this.prepared = prepare();
      const d = new Diagnosis(this.prepared);
      for (const k of entries) d.add(k.entry);
      const obs = d.observations();
      this.lastObs = obs;
      if (!before) {
        this.current = d.finish({ significantOnly: true }).findings;
        return;
      }
      const changed = changedServices(before, obs);
      if (changed.size === 0) return;
      const keys = new Set([...changed].map((s) => portKey(s, s.protocol, s.port)));
      const kept = this.current.filter((f) => !keys.has(portKey(f.service, f.port.protocol, f.port.port)));
      this.current = [...kept, ...d.finish({ only: changed, significantOnly: true }).findings].sort(compareFindings);
    } catch (e) {
      this.log.error({ err: errText(e) }, 'diagnosis failed');
    }
  }

  private logChanges(next: readonly Finding[]): void {
    const id = (f: Finding) =>
      `${f.service.namespace}/${f.service.name}:${f.port.port}/${f.port.protocol} ${f.mechanism} ${f.severity}`;
    const before = new Set(this.findings.map(id));
    const after = new Set(next.map(id));
    for (const f of next)
      if (!before.has(id(f))) this.log.warn({ finding: id(f), summary: f.summary }, 'finding raised');
    for (const k of before) if (!after.has(k)) this.log.info({ finding: k }, 'finding cleared');
  }
}
