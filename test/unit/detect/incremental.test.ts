// The agent's incremental diagnosis (only the Service ports whose observations changed are
// re-diagnosed) must give exactly what a full diagnosis over the same entries gives, whichever
// way the entry set moved: entries appearing, ending, or changing state.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Observations } from '../../../src/detect/correlator.js';
import {
  changedServices,
  compareFindings,
  Diagnosis,
  type PreparedDiagnosis,
  prepareDiagnosis,
} from '../../../src/detect/index.js';
import type { Finding } from '../../../src/detect/types.js';
import type { ConntrackEntry } from '../../../src/kernel/types.js';
import { portKey } from '../../../src/model/service.js';
import { BUNDLES, loadCase } from './fixture-bundle.js';

const cases = readdirSync(BUNDLES).filter((d) => statSync(join(BUNDLES, d)).isDirectory());

function run(p: PreparedDiagnosis, entries: ConntrackEntry[]): { d: Diagnosis; obs: Observations } {
  const d = new Diagnosis(p);
  d.conntrackSeen();
  for (const e of entries) d.add(e);
  return { d, obs: d.observations() };
}

/** What the agent does: keep the findings of unchanged ports, re-diagnose the changed ones. */
function step(p: PreparedDiagnosis, prev: { obs: Observations; findings: Finding[] }, entries: ConntrackEntry[]) {
  const { d, obs } = run(p, entries);
  const changed = changedServices(prev.obs, obs);
  const keys = new Set([...changed].map((s) => portKey(s, s.protocol, s.port)));
  const kept = prev.findings.filter((f) => !keys.has(portKey(f.service, f.port.protocol, f.port.port)));
  return { obs, findings: [...kept, ...d.finish(changed).findings].sort(compareFindings), changed };
}

const full = (p: PreparedDiagnosis, entries: ConntrackEntry[]) => run(p, entries).d.finish().findings;

describe('incremental diagnosis', () => {
  for (const name of cases) {
    it(`${name}: equals a full diagnosis as entries appear one by one and end one by one`, () => {
      const { input } = loadCase(name);
      const entries = [...(input.conntrack ?? [])];
      const p = prepareDiagnosis(input);
      let state = { obs: run(p, []).obs, findings: full(p, []) };
      for (let n = 1; n <= entries.length; n++) {
        state = step(p, state, entries.slice(0, n));
        expect(state.findings).toEqual(full(p, entries.slice(0, n)));
      }
      for (let n = 1; n <= entries.length; n++) {
        state = step(p, state, entries.slice(n));
        expect(state.findings).toEqual(full(p, entries.slice(n)));
      }
    });
  }

  it('an entry replaced by its update (new object) marks its Service port changed, nothing else', () => {
    const { input } = loadCase('tke-ipvs-unbound-l4-loop');
    const entries = [...input.conntrack!];
    const p = prepareDiagnosis(input);
    const before = run(p, entries);
    const again = run(p, entries);
    expect(changedServices(before.obs, again.obs).size).toBe(0);
    const l4 = before.obs.groups.find((g) => g.kind === 'l4')!;
    const out = l4.examples[0]![0]!;
    const updated = entries.map((e) => (e === out ? { ...e, timeoutS: e.timeoutS - 1 } : e));
    const after = step(p, { obs: before.obs, findings: before.d.finish().findings }, updated);
    expect([...after.changed].map((s) => s.name)).toEqual([l4.svc.name]);
    expect(after.findings).toEqual(full(p, updated));
  });
});
