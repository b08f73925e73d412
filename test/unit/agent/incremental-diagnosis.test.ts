// The agent's incremental diagnosis (only the Service ports whose observations changed are
// re-diagnosed) must give exactly what a full diagnosis over the same entries gives, whichever
// way the entry set moved: entries appearing, ending, or changing state. Primed before the first conntrack dump
// (every Service port, no entries, nothing published), its first run() publishes and logs what an unprimed one does.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { describe, expect, it, vi } from 'vitest';
import type { KeptEntry } from '../../../src/agent/conntrack-table.js';
import { IncrementalDiagnosis } from '../../../src/agent/diagnosis.js';
import type { Observations } from '../../../src/detect/correlator.js';
import { changedServices, Diagnosis, type PreparedDiagnosis, prepareDiagnosis } from '../../../src/detect/index.js';
import type { ConntrackEntry } from '../../../src/kernel/types.js';
import type { Logger } from '../../../src/log.js';
import { BUNDLES, loadCase } from '../detect/fixture-bundle.js';

const cases = readdirSync(BUNDLES).filter((d) => statSync(join(BUNDLES, d)).isDirectory());

/** A diagnosis fed `entries`, conntrack read. */
function fed(p: PreparedDiagnosis, entries: ConntrackEntry[]): Diagnosis {
  const d = new Diagnosis(p);
  d.conntrackSeen();
  for (const e of entries) d.add(e);
  return d;
}

const observations = (p: PreparedDiagnosis, entries: ConntrackEntry[]): Observations => fed(p, entries).observations();

/** What the agent publishes after a full diagnosis: the findings that are not info. */
const full = (p: PreparedDiagnosis, entries: ConntrackEntry[]) =>
  fed(p, entries)
    .finish()
    .findings.filter((f) => f.severity !== 'info');

/** Entries as the table keeps them: the diagnosis reads only the entry of a kept one. */
const kept = (entries: Iterable<ConntrackEntry>): KeptEntry[] =>
  [...entries].map((entry) => ({ entry }) as unknown as KeptEntry);

/** The agent's incremental diagnosis over one prepared input, run on a list of entries at a time. */
function incremental(p: PreparedDiagnosis): { run(entries: ConntrackEntry[]): IncrementalDiagnosis['findings'] } {
  const inc = new IncrementalDiagnosis(pino({ level: 'silent' }));
  return {
    run(entries) {
      inc.run(() => p, kept(entries));
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

/** A logger that records what the diagnosis logs, in order. */
function recordingLog(): { log: Logger; lines: unknown[][] } {
  const lines: unknown[][] = [];
  const at = (level: string) => vi.fn((...args: unknown[]) => void lines.push([level, ...args]));
  return { log: { warn: at('warn'), info: at('info'), error: at('error') } as unknown as Logger, lines };
}

describe('IncrementalDiagnosis.prime', () => {
  for (const name of cases) {
    it(`${name}: a primed first run publishes and logs what an unprimed one does`, () => {
      const { input } = loadCase(name);
      const entries = kept(input.conntrack ?? []);
      const prepare = () => prepareDiagnosis(input);

      const plain = recordingLog();
      const unprimed = new IncrementalDiagnosis(plain.log);
      unprimed.run(prepare, entries);

      const primedLog = recordingLog();
      const primed = new IncrementalDiagnosis(primedLog.log);
      primed.prime(prepare);
      expect(primed.findings).toEqual([]);
      expect(primedLog.lines).toEqual([]);
      primed.run(prepare, entries);

      expect(primed.findings).toEqual(unprimed.findings);
      expect(primedLog.lines).toEqual(plain.lines);
      expect(plain.lines.some(([level]) => level === 'error')).toBe(false);
    });
  }

  it('a run with nothing changed since the prime still publishes its findings', () => {
    const { input } = loadCase(cases[0]!);
    const prepare = () => prepareDiagnosis(input);
    const unprimed = new IncrementalDiagnosis(recordingLog().log);
    unprimed.run(prepare, []);
    const primed = new IncrementalDiagnosis(recordingLog().log);
    primed.prime(prepare);
    primed.run(prepare, []);
    expect(primed.findings).toEqual(unprimed.findings);
    expect(primed.findings.length).toBeGreaterThan(0);
  });
});
