// Every fixture case: the findings it must contain and the ones it must not.
import { readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { diagnose } from '../../../src/detect/index.js';
import { DETECTORS } from '../../../src/detect/list.js';
import type { Finding } from '../../../src/detect/types.js';
import { BUNDLES, type Expectation, loadCase } from './fixture-bundle.js';

const matches = (f: Finding, e: Expectation): boolean =>
  `${f.service.namespace}/${f.service.name}` === e.service && f.mechanism === e.mechanism && f.severity === e.severity;

const cases = readdirSync(BUNDLES, { withFileTypes: true })
  .filter((d) => d.isDirectory())
  .map((d) => d.name)
  .sort();

describe('fixture bundles', () => {
  it('has a case for every mechanism, positive and negative', () => {
    const all = cases.map((n) => loadCase(n).c);
    for (const m of DETECTORS.map((d) => d.mechanism)) {
      expect(
        all.some((c) => c.expect.some((e) => e.mechanism === m)),
        `positive ${m}`,
      ).toBe(true);
      expect(
        all.some((c) => c.absent.some((e) => e.mechanism === m)),
        `negative ${m}`,
      ).toBe(true);
    }
  });

  it.each(cases)('%s', (name) => {
    const { c, input } = loadCase(name);
    const { findings, warnings } = diagnose(input);
    const list = findings.map((f) => `${f.severity} ${f.mechanism} ${f.service.namespace}/${f.service.name}`);
    for (const e of c.expect)
      expect(
        findings.some((f) => matches(f, e)),
        `${JSON.stringify(e)} in\n${list.join('\n')}`,
      ).toBe(true);
    for (const e of c.absent)
      expect(
        findings.some((f) => matches(f, e)),
        `${JSON.stringify(e)} must be absent`,
      ).toBe(false);
    // Sorted most severe first.
    const rank = { active: 0, risk: 1, info: 2 };
    expect(findings.map((f) => rank[f.severity])).toEqual(findings.map((f) => rank[f.severity]).sort());
    // Every non-info finding quotes evidence and names a fix.
    for (const f of findings.filter((x) => x.severity !== 'info')) {
      expect(f.evidence.length).toBeGreaterThan(0);
      expect(f.remedy.length).toBeGreaterThan(20);
    }
    expect(warnings.filter((w) => w.includes('not read'))).toEqual([]);
  });
});
