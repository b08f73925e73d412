// The agent's incremental diagnosis (only the Service ports whose observations changed are
// re-diagnosed) must give exactly what a full diagnosis over the same entries gives, whichever
// way the entry set moved: entries appearing, ending, or changing state.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { KeptEntry } from '../../../src/agent/conntrack-table.js';
import { IncrementalDiagnosis } from '../../../src/agent/diagnosis.js';
import type { Observations } from '../../../src/detect/correlator.js';
import { changedServices, Diagnosis, type PreparedDiagnosis, prepareDiagnosis } from '../../../src/detect/index.js';
import type { ConntrackEntry } from '../../../src/kernel/types.js';
import { BUNDLES, loadCase } from '../detect/fixture-bundle.js';

const cases = readdirSync(BUNDLES).filter((d) => statSync(join(BUNDLES, d)).isDirectory());

function observations(p: PreparedDiagnosis, entries: ConntrackEntry[]): Observations {
  const d = new Diagnosis(p);
  d.conntrackSeen();
  for (const e of entries) d.add(e);
  return d.observations();
}

/** What the agent publishes after a full diagnosis: the findings that are not info. */
function full(p: PreparedDiagnosis, entries: ConntrackEntry[]) {
  const d = new Diagnosis(p);
  d.conntrackSeen();
  for (const e of entries) d.add(e);
  return d.finish().findings.filter((f) => f.severity !== 'info');
}

/** The agent's incremental diagnosis over one prepared input, run on a list of entries at a time. */
function incremental(p: PreparedDiagnosis): { run(entries: ConntrackEntry[]): IncrementalDiagnosis['findings'] } {
  const inc = new IncrementalDiagnosis(pino({ level: 'silent' }));
  return {
    run(entries) {
      // The diagnosis reads only the entry of a kept one.
      inc.run(
        () => p,
        entries.map((entry) => ({ entry }) as unknown as KeptEntry),
      );
      return inc.findings;
    },
  };
}

describe('incremental diagnosis', () => {
  for (const name of cases) {
    it(`${name}: equals a full diagnosis as entries appear one by one and end one by one`, () => {
      const { input } = loadCase(name);
      const entries = [...(input.conntrack ?? [])];
      const p = prepareDiagnosis(input);
      const inc = incremental(p);
      expect(inc.run([])).toEqual(full(p, []));
      for (let n = 1; n <= entries.length; n++) {
        expect(inc.run(entries.slice(0, n))).toEqual(full(p, entries.slice(0, n)));
      }
      for (let n = 1; n <= entries.length; n++) {
        expect(inc.run(entries.slice(n))).toEqual(full(p, entries.slice(n)));
      }
    });
  }

  it('an entry replaced by its update (new object) marks its Service port changed, nothing else', () => {
    const { input } = loadCase('tke-ipvs-unbound-l4-loop');
    const entries = [...input.conntrack!];
    const p = prepareDiagnosis(input);
    const before = observations(p, entries);
    expect(changedServices(before, observations(p, entries)).size).toBe(0);
    const l4 = before.groups.find((g) => g.kind === 'l4')!;
    const out = l4.examples[0]![0]!;
    const updated = entries.map((e) => (e === out ? { ...e, timeoutS: e.timeoutS - 1 } : e));
    expect([...changedServices(before, observations(p, updated))].map((s) => s.name)).toEqual([l4.svc.name]);
    const inc = incremental(p);
    inc.run(entries);
    expect(inc.run(updated)).toEqual(full(p, updated));
  });
});
