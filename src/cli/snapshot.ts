// `clbprobe snapshot`: what this node's datapath looks like, for humans or as JSON.

import { isIP } from 'node:net';
import type { Command } from 'commander';
import { isPermissionReason } from '../model/permission.js';
import { netnsPath } from '../netns-path.js';
import { printable } from '../printable.js';
import { failing, UserError } from './errors.js';

interface SnapshotFlags {
  json?: boolean;
  conntrack?: boolean;
  filterAddress: string[];
  netns?: string;
}

async function runSnapshot(flags: SnapshotFlags): Promise<void> {
  const out = process.stdout;
  for (const a of flags.filterAddress) if (!isIP(a)) throw new UserError(`--filter-address: not an IP address: ${a}`);
  const [{ takeSnapshot }, { renderSnapshot }, { formatConntrack }] = await Promise.all([
    import('../source/snapshot.js'),
    import('./snapshot-render.js'),
    import('../kernel/conntrack/format.js'),
  ]);
  const snap = await takeSnapshot({
    ...(flags.netns ? { netns: netnsPath(flags.netns) } : {}),
    conntrackEntries: !!flags.conntrack,
    ...(flags.filterAddress.length ? { conntrackFilter: { addresses: flags.filterAddress } } : {}),
  });
  // A source that failed for a missing privilege fails the whole command with exit 2.
  const denied = snap.sources.filter((s) => !s.available && isPermissionReason(s.reason));
  if (denied.length)
    throw new UserError(
      `snapshot: cannot read ${denied.map((s) => s.source).join(', ')}: ` +
        `${denied[0]!.reason}; run as root or grant the capability`,
    );
  if (flags.json) {
    out.write(`${JSON.stringify(snap, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2)}\n`);
  } else {
    for (const line of renderSnapshot(snap)) out.write(`${line}\n`);
    if (snap.conntrack?.entries) {
      out.write(
        `\nConntrack entries${flags.filterAddress.length ? ` involving ${flags.filterAddress.join(', ')}` : ''}:\n`,
      );
      for (const e of snap.conntrack.entries) out.write(`${printable(formatConntrack(e))}\n`);
    }
  }
}

export function register(program: Command): void {
  program
    .command('snapshot')
    .description(
      "Print this node's datapath as clbprobe sees it: addresses (kube-ipvs0 first), the IPVS table,\n" +
        'kube-proxy NAT rules and ipsets, and a conntrack summary. Read-only; needs root or CAP_NET_ADMIN.',
    )
    .option('--json', 'print the full typed snapshot as JSON')
    .option('--conntrack', 'include conntrack entries (in conntrack -L format, or in the JSON)')
    .option(
      '--filter-address <ip>',
      'only conntrack entries with this address in either tuple (repeatable)',
      (v: string, acc: string[]) => [...acc, v],
      [] as string[],
    )
    .option('--netns <name>', 'read the network namespace NAME (/var/run/netns/NAME) or a path')
    .addHelpText(
      'after',
      `
Examples:
  clbprobe snapshot
  clbprobe snapshot --conntrack --filter-address 10.0.0.100   entries of one LB VIP
  clbprobe snapshot --json | jq '.addresses.interfaces[0]'

Exit codes: 0 ok (sources that are absent, e.g. IPVS on an iptables node, are reported, not fatal);
2 on errors, e.g. missing privileges (one line naming the capability).`,
    )
    .action(failing(runSnapshot));
}
