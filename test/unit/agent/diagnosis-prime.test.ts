// The agent primes its diagnosis before the first conntrack dump (every Service port, no entries, nothing
// published): the first run() after it must publish and log exactly what an unprimed first run does.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import type { KeptEntry } from '../../../src/agent/conntrack-table.js';
import { IncrementalDiagnosis } from '../../../src/agent/diagnosis.js';
import { prepareDiagnosis } from '../../../src/detect/index.js';
import type { Logger } from '../../../src/log.js';
import { BUNDLES, loadCase } from '../detect/fixture-bundle.js';

const cases = readdirSync(BUNDLES).filter((d) => statSync(join(BUNDLES, d)).isDirectory());

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
      // The diagnosis reads only the entry of a kept one.
      const kept = [...(input.conntrack ?? [])].map((entry) => ({ entry }) as unknown as KeptEntry);
      const prepare = () => prepareDiagnosis(input);

      const plain = recordingLog();
      const unprimed = new IncrementalDiagnosis(plain.log);
      unprimed.run(prepare, kept);

      const primedLog = recordingLog();
      const primed = new IncrementalDiagnosis(primedLog.log);
      primed.prime(prepare);
      expect(primed.findings).toEqual([]);
      expect(primedLog.lines).toEqual([]);
      primed.run(prepare, kept);

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
