// kube-proxy's nftables tables (`nft -j list table`; `list ruleset` in a bundle); absent, not down, in other modes.
import { createHash } from 'node:crypto';
import { BUNDLE_FILES } from '../bundle/names.js';
import { type NftCommandResult, nftSnapshotOf, nftSnapshotOfRuleset, runNftLists } from '../kernel/nft/read.js';
import type { NftSnapshot } from '../kernel/nft/types.js';
import { fromBundleFile, type ReadResult, readerOf, type SourceDef } from './contract.js';

const NOT_NFTABLES = 'no table ip/ip6 kube-proxy: kube-proxy is not in nftables mode';

/** Of both listings: the same tables again are "unchanged" (nft prints no counters or timestamps here). */
function digestOf(r: Record<'ip' | 'ip6', NftCommandResult>): string {
  const h = createHash('sha256');
  for (const x of [r.ip, r.ip6]) h.update(x.ok ? `ok\0${x.stdout}` : `failed\0${x.reason}`).update('\0');
  return h.digest('hex');
}

function resultOf(snap: NftSnapshot | undefined, error = 'unreadable'): ReadResult<NftSnapshot> {
  if (!snap) return { state: 'down', reason: error };
  const unreadable = Object.values(snap.unreadable ?? {}).join('; ');
  const read = snap.tables.length > 0;
  // A table that could not be read may exist: without any other table, or for IPv4, that is down, not absent.
  if (unreadable && (!read || snap.unreadable?.ip)) {
    return { state: 'down', reason: unreadable, warnings: snap.warnings, ...(read ? { value: snap } : {}) };
  }
  if (!read) return { state: 'absent', reason: NOT_NFTABLES, warnings: snap.warnings };
  const notes = [
    ...(snap.absent.length > 0 ? [`no table ${snap.absent.join('/')} kube-proxy (single-stack)`] : []),
    ...(unreadable ? [`IPv6 rules unknown: ${unreadable}`] : []),
  ];
  return { state: 'up', value: snap, warnings: snap.warnings, ...(notes.length > 0 ? { note: notes.join('; ') } : {}) };
}

export const nft: SourceDef<NftSnapshot> = {
  name: 'nft',
  key: 'nft',
  live(opts) {
    let digest: string | undefined;
    return readerOf(nft, async () => {
      const lists = await runNftLists(opts.netns ? { netns: opts.netns } : {});
      const d = digestOf(lists);
      if (d === digest) return { state: 'unchanged' };
      digest = d;
      const r = nftSnapshotOf(lists);
      return resultOf(r.snapshot, r.error);
    });
  },
  /** The whole ruleset, not only kube-proxy's tables: what else hooks in, and at which priority, matters too. */
  async collect(w) {
    await w.run(BUNDLE_FILES.nftRuleset, ['nft', '-j', 'list', 'ruleset']);
  },
  /** kube-proxy's tables out of nft-ruleset.json; a cut file keeps its complete items (with a warning). */
  fromBundle: (b) =>
    fromBundleFile(b, BUNDLE_FILES.nftRuleset, (text, path) => resultOf(nftSnapshotOfRuleset(text, path))),
};
