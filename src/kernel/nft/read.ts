// kube-proxy's nftables tables via `nft -j list table`, since only libnftables decodes nf_tables bytecode; listing
// only kube-proxy's tables keeps other components' unknown expressions from failing the read.
import { errText } from '../../errors.js';
import { runCommand } from '../nat/command.js';
import { MAX_NFT_JSON_BYTES, parseNftJson } from './parse.js';
import type { NftDump, NftSnapshot } from './types.js';

export interface ReadNftOptions {
  /** `ip netns` name, or a path such as /proc/PID/ns/net. */
  netns?: string;
  /** Per listing; default 60 s. */
  timeoutMs?: number;
}

export type NftCommandResult = { ok: true; stdout: string } | { ok: false; reason: string; absent?: boolean };

const KUBE_PROXY_FAMILIES = ['ip', 'ip6'] as const;

/** The command for one family's table, as evidence and manifests name it. */
function nftListCommand(family: 'ip' | 'ip6'): string {
  return `nft -j list table ${family} kube-proxy`;
}

/** Takes the family's kube-proxy table from dump into snap, or notes it absent (unreadable if the listing was cut). */
function takeKubeProxyTable(snap: NftSnapshot, dump: NftDump, family: 'ip' | 'ip6', source: string): void {
  const table = dump.tables.find((t) => t.family === family && t.name === 'kube-proxy');
  if (table) {
    snap.tables.push(table);
    snap.sources[family] = source;
  } else if (dump.cut) markUnreadable(snap, family, `${source}: cut short before any table ${family} kube-proxy`);
  else snap.absent.push(family);
}

function markUnreadable(snap: NftSnapshot, family: 'ip' | 'ip6', reason: string): void {
  snap.unreadable = { ...snap.unreadable, [family]: reason };
}

/** nft's answer for `list table` when the table is absent (another proxy mode, or single-stack). */
const NO_TABLE = /No such file or directory/;

export async function runNftLists(opts: ReadNftOptions = {}): Promise<Record<'ip' | 'ip6', NftCommandResult>> {
  const [ip, ip6] = await Promise.all(
    KUBE_PROXY_FAMILIES.map((f) => runNft(['-j', 'list', 'table', f, 'kube-proxy'], opts)),
  );
  return { ip: ip!, ip6: ip6! };
}

/** The snapshot from both families' outputs; undefined (with the reason) when nft could not run at all. */
export function nftSnapshotOf(results: Record<'ip' | 'ip6', NftCommandResult>): {
  snapshot?: NftSnapshot;
  error?: string;
} {
  const snap: NftSnapshot = { tables: [], sources: {}, absent: [], warnings: [] };
  for (const family of KUBE_PROXY_FAMILIES) {
    const r = results[family];
    const cmd = nftListCommand(family);
    if (!r.ok) {
      if (r.absent) snap.absent.push(family);
      else markUnreadable(snap, family, `${cmd}: ${r.reason}`);
      continue;
    }
    try {
      const dump = parseNftJson(r.stdout, cmd);
      snap.warnings.push(...dump.warnings);
      if (dump.version) snap.version = dump.version;
      takeKubeProxyTable(snap, dump, family, cmd);
    } catch (e) {
      markUnreadable(snap, family, errText(e));
    }
  }
  const errors = Object.values(snap.unreadable ?? {});
  if (errors.length === KUBE_PROXY_FAMILIES.length) return { error: errors.join('; ') };
  snap.warnings.push(...errors);
  return { snapshot: snap };
}

/** The snapshot from a bundle's `nft -j list ruleset`: kube-proxy's tables only; a cut listing keeps whole items. */
export function nftSnapshotOfRuleset(text: string, source: string): NftSnapshot {
  const dump = parseNftJson(text, source);
  const snap: NftSnapshot = {
    tables: [],
    sources: {},
    absent: [],
    warnings: dump.warnings,
    ...(dump.version ? { version: dump.version } : {}),
  };
  for (const family of KUBE_PROXY_FAMILIES) takeKubeProxyTable(snap, dump, family, source);
  return snap;
}

async function runNft(args: string[], opts: ReadNftOptions): Promise<NftCommandResult> {
  const r = await runCommand('nft', args, {
    ...(opts.netns ? { netns: opts.netns } : {}),
    // nft's own listing of a large ruleset is slow on a loaded host, hence the long default.
    timeoutMs: opts.timeoutMs ?? 60_000,
    maxBytes: MAX_NFT_JSON_BYTES,
    reader: 'nft',
  });
  if (r.ok) return { ok: true, stdout: r.stdout.toString('utf8') };
  return NO_TABLE.test(r.reason) ? { ok: false, reason: 'no such table', absent: true } : r;
}
