// The fuzz harness (bench/fuzz-targets.ts) in the test suite: a few thousand cases per parser of
// outside input, mutated from the real fixtures, a fixed seed so a failure replays. `npm run fuzz`
// runs the same targets at 100,000 cases each.
import { describe, expect, it } from 'vitest';
import { fuzzOne, fuzzTargets } from '../../../bench/fuzz-targets.js';

/** The same number for every target: the slowest (nft facts, iptables-save facts) take 1-2 ms a case. */
const CASES = 2000;

describe('fuzz: every parser of outside input', () => {
  for (const t of fuzzTargets()) {
    it(`${t.name}: no crash, no slow case`, () => {
      const r = fuzzOne(t, CASES, 16);
      expect(r.crashes, JSON.stringify(r.crashes.slice(0, 3), null, 1)).toEqual([]);
      expect(r.slow).toEqual([]);
      // The mutations reach the error paths (a harness that only fed valid input would prove nothing).
      if (!['kube-proxy config mode', 'watch line'].includes(t.name)) expect(r.refused).toBeGreaterThan(0);
    }, 60_000);
  }
});
