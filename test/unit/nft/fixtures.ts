import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseNftJson } from '../../../src/kernel/nft/parse.js';
import type { NftSnapshot } from '../../../src/kernel/nft/types.js';

export const nftFixture = (name: string): string =>
  readFileSync(fileURLToPath(new URL(`../../fixtures/nft/${name}`, import.meta.url)), 'utf8');

/** The snapshot the reader would build from the captured listings of one layout. */
export function nftSnapshotOf(layout: 'v1.31' | 'v1.34', families: ('ip' | 'ip6')[] = ['ip', 'ip6']): NftSnapshot {
  const snap: NftSnapshot = { tables: [], sources: {}, absent: [], warnings: [] };
  for (const f of families) {
    const name = `kube-proxy-${layout}.${f}.json`;
    const d = parseNftJson(nftFixture(name), name);
    snap.tables.push(...d.tables);
    snap.sources[f] = name;
    snap.warnings.push(...d.warnings);
  }
  return snap;
}
