// Text rendering of a NodeSnapshot for terminals.
import type { NatSnapshot } from '../kernel/nat/types.js';
import type { IpvsVirtualServer } from '../kernel/types.js';
import { formatNatSummary } from '../kubeproxy/summary.js';
import type { SourceStatus } from '../model/source-status.js';
import { printable } from '../printable.js';
import type { NodeSnapshot } from '../source/node-snapshot.js';

const NO_IPTABLES = {
  backend: 'nft',
  reason: 'no iptables rules read',
  ruleLines: 0,
  kubeRuleLines: 0,
  kubeletChains: false,
} as const;
/** NAT without iptables rules, for formatNatSummary's nftables lines (its first line, the backend, left out). */
const NFT_ONLY: NatSnapshot = {
  backend: 'nft',
  backendChoice: { backend: 'nft', reason: NO_IPTABLES.reason, legacy: NO_IPTABLES, nft: NO_IPTABLES },
  warnings: [],
};

function sourceLine(status: SourceStatus): string {
  const t = status.durationMs !== undefined ? ` (${status.durationMs.toFixed(1)} ms)` : '';
  if (status.available) return `  ${status.source.padEnd(10)} ok${t}${status.reason ? `: ${status.reason}` : ''}`;
  return `  ${status.source.padEnd(10)} unavailable: ${status.reason ?? 'unknown reason'}`;
}

function vsName(server: IpvsVirtualServer): string {
  if (server.fwmark !== undefined) return `FWM ${server.fwmark}${server.family === 6 ? ' IPv6' : ''}`;
  const host = server.family === 6 ? `[${server.address}]` : server.address;
  return `${server.protocol} ${host}:${server.port}`;
}

function counts(rec: Record<string, number>): string {
  return Object.entries(rec)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
}

/** The snapshot's lines, each with its control characters shown (names, reasons and rules come from outside). */
export function renderSnapshot(snapshot: NodeSnapshot): string[] {
  const out: string[] = [`Node ${snapshot.hostname}, kernel ${snapshot.kernel}, at ${snapshot.takenAt}`, 'Sources:'];
  out.push(...snapshot.sources.map(sourceLine));

  if (snapshot.addresses) {
    out.push('', 'Addresses:');
    for (const i of snapshot.addresses.interfaces) {
      const kind = [i.kind, i.up ? 'up' : 'down'].filter(Boolean).join(', ');
      out.push(`  ${i.name}${i.isKubeIpvs ? ' [kube-ipvs0: Service VIPs bound here]' : ''} (${kind})`);
      for (const a of i.addresses)
        out.push(`    ${a.address}/${a.prefixLen} scope ${a.scope}${a.flags.length ? ` ${a.flags.join(' ')}` : ''}`);
    }
  }

  if (snapshot.ipvs) {
    out.push('', `IPVS: ${snapshot.ipvs.virtualServers.length} virtual servers`);
    for (const v of snapshot.ipvs.virtualServers) {
      out.push(`  ${vsName(v)} ${v.scheduler}${v.flags.length ? ` (${v.flags.join(',')})` : ''}`);
      for (const r of v.realServers) {
        const host = r.address.includes(':') ? `[${r.address}]` : r.address;
        out.push(
          `    -> ${host}:${r.port} ${r.forward} weight ${r.weight} ` +
            `active ${r.activeConns} inactive ${r.inactiveConns}`,
        );
      }
    }
  }

  if (snapshot.nat || snapshot.nft) {
    const lines = formatNatSummary(snapshot.nat ?? NFT_ONLY, snapshot.nft);
    out.push('', snapshot.nat ? 'NAT:' : 'NAT (nftables only):');
    out.push(...(snapshot.nat ? lines : lines.slice(1)).map((l) => `  ${l}`));
  }

  if (snapshot.conntrack) {
    const c = snapshot.conntrack.summary;
    out.push('', `Conntrack: ${c.total} entries`);
    if (c.total) {
      out.push(`  by protocol: ${counts(c.byProto)}`);
      out.push(`  by state:    ${counts(c.byState)}`);
    }
  }
  return out.map(printable);
}
