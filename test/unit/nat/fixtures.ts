// Reads the captured NAT fixtures (test/fixtures/nat) and parses them the way readNat would.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chooseBackend } from '../../../src/kernel/nat/backend.js';
import { parseIpsetSave } from '../../../src/kernel/nat/ipset.js';
import { parseIptablesSave } from '../../../src/kernel/nat/iptables-save.js';
import type { NatFamily, NatSnapshot, XtablesBackend } from '../../../src/kernel/nat/types.js';

export const FIXTURE_DIR = fileURLToPath(new URL('../../fixtures/nat/', import.meta.url));

export function fixture(name: string): string {
  return readFileSync(join(FIXTURE_DIR, name), 'utf8');
}

export function parseFixture(name: string, family: NatFamily = 4) {
  return parseIptablesSave(fixture(name), { source: name, family });
}

/** A NatSnapshot as readNat would build it from these captures (all read from `backend`). */
export function snapshotOf(backend: XtablesBackend, files: { v4: string; v6?: string; ipset?: string }): NatSnapshot {
  const texts = [fixture(files.v4), ...(files.v6 ? [fixture(files.v6)] : [])];
  const choice = chooseBackend(
    backend === 'legacy' ? { texts } : { texts: [] },
    backend === 'nft' ? { texts } : { texts: [] },
  );
  return {
    backend: choice.backend,
    backendChoice: choice,
    v4: parseFixture(files.v4, 4),
    ...(files.v6 ? { v6: parseFixture(files.v6, 6) } : {}),
    ...(files.ipset ? { ipsets: parseIpsetSave(fixture(files.ipset), files.ipset) } : {}),
    warnings: [],
  };
}
