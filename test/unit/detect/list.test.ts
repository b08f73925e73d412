// The DETECTORS list is the one place a detector is registered: every detector file's
// DetectorDef is in it, and what is derived from it (the README's Findings reference, the
// correlator's kinds) agrees with it.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { OBS_KINDS } from '../../../src/detect/correlator.js';
import { diagnose } from '../../../src/detect/index.js';
import { DETECTORS, MECHANISM_RANK, OBSERVED_KINDS } from '../../../src/detect/list.js';
import { findingsTable, withFindingsTable } from '../../../src/detect/reference.js';
import { BUNDLES, loadCase } from './fixture-bundle.js';

const DETECT = resolve(import.meta.dirname, '../../../src/detect');
const README = resolve(import.meta.dirname, '../../../README.md');

/** A DetectorDef by its shape: what list.ts needs of an entry. */
function isDetectorDef(v: unknown): v is (typeof DETECTORS)[number] {
  if (typeof v !== 'object' || v === null) return false;
  const o = v as Record<string, unknown>;
  return typeof o.mechanism === 'string' && typeof o.detect === 'function' && Array.isArray(o.observes);
}

describe('DETECTORS', () => {
  it('lists every DetectorDef that a file of src/detect exports', async () => {
    const listed = new Set<unknown>(DETECTORS);
    const found: string[] = [];
    for (const f of readdirSync(DETECT).filter((n) => n.endsWith('.ts'))) {
      const mod = (await import(resolve(DETECT, f))) as Record<string, unknown>;
      for (const [name, v] of Object.entries(mod)) {
        if (!isDetectorDef(v)) continue;
        found.push(v.mechanism);
        expect(
          listed.has(v),
          `${f} exports the detector ${name} (${v.mechanism}), which is not in DETECTORS (src/detect/list.ts)`,
        ).toBe(true);
      }
    }
    expect(found.sort()).toEqual(DETECTORS.map((d) => d.mechanism).sort());
  });

  it('has one detector per mechanism, each with a fix and a README row', () => {
    const names = DETECTORS.map((d) => d.mechanism);
    expect(new Set(names).size).toBe(names.length);
    for (const d of DETECTORS) {
      expect(d.fix.length, d.mechanism).toBeGreaterThan(20);
      expect(d.readme.what.length, d.mechanism).toBeGreaterThan(20);
      expect(d.readme.fix.length, d.mechanism).toBeGreaterThan(10);
    }
    expect(Object.keys(MECHANISM_RANK)).toEqual(names);
  });

  it('reads every kind the correlator records (an unread kind would be counted and never reported)', () => {
    expect([...OBS_KINDS].filter((k) => !OBSERVED_KINDS.has(k))).toEqual([]);
  });

  it('is what the README Findings reference says (npm run readme:findings rewrites it)', () => {
    const readme = readFileSync(README, 'utf8');
    expect(
      withFindingsTable(readme),
      'README.md Findings reference differs from DETECTORS: run `npm run readme:findings`',
    ).toBe(readme);
    for (const d of DETECTORS) expect(findingsTable()).toContain(`| \`${d.mechanism}\` |`);
  });
});

describe('contextOnly detectors', () => {
  // The agent skips them when it wants only significant findings, so one that ever raised risk or active would be lost.
  it('raise only info findings on every fixture bundle', () => {
    const contextOnly = new Set<string>(DETECTORS.filter((d) => d.contextOnly).map((d) => d.mechanism));
    expect(contextOnly.size).toBeGreaterThan(0);
    let seen = 0;
    for (const name of readdirSync(BUNDLES).filter((d) => statSync(resolve(BUNDLES, d)).isDirectory())) {
      for (const f of diagnose(loadCase(name).input).findings) {
        if (!contextOnly.has(f.mechanism)) continue;
        seen++;
        expect(f.severity, `${name}: ${f.mechanism} ${f.summary}`).toBe('info');
      }
    }
    expect(seen).toBeGreaterThan(0);
  });
});
