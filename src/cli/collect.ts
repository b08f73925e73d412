// `clbprobe collect`: an offline bundle of this node for `clbprobe diagnose --from DIR`.

import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import type { BundleManifest } from '../bundle/manifest.js';
import { netnsPath } from '../netns-path.js';
import { fail, UserError } from './errors.js';

interface CollectFlags {
  out: string;
  netns?: string;
  clusterFile?: string;
  kubeconfig?: string;
  nodeName?: string;
}

function summary(manifest: BundleManifest, out: string): string {
  const written = manifest.files.filter((f) => f.file);
  const problems = manifest.files.filter((f) => f.error && !f.skipped);
  const skipped = manifest.files.filter((f) => f.skipped);
  const lines = [`clbprobe collect: ${written.length} files written to ${out} (manifest.json lists each command)`];
  for (const f of problems) lines.push(`  problem: ${f.command}: ${f.error}`);
  for (const f of skipped) lines.push(`  skipped: ${f.command}: ${f.error}`);
  return `${lines.join('\n')}\n`;
}

export function register(program: Command): void {
  program
    .command('collect')
    .description(
      'Write an offline bundle of this node into a directory: addresses and routes (ip -j), the IPVS table ' +
        '(ipvsadm), iptables/ip6tables rules of both backends, ipsets, conntrack entries, ' +
        "rp_filter/route_localnet/nf_conntrack sysctls, the kernel version, kube-proxy's mode, the cluster " +
        "JSON when given, the resolver's answers for its hostname-only LB names, and manifest.json (times, " +
        'version, and for each file its command, exit status, duration, size and errors). A missing tool or ' +
        'permission is written into the manifest and never stops the rest. Read it anywhere with `clbprobe ' +
        'diagnose --from DIR`.',
    )
    .requiredOption('--out <dir>', 'bundle directory to write (created if missing)')
    .option(
      '--cluster-file <file>',
      'kubectl get svc,ingress,endpointslices,nodes -A -o json output to include as cluster.json ' +
        '(with Gateway API, add gatewayclasses,gateways,httproutes,grpcroutes,referencegrants)',
    )
    .option(
      '--kubeconfig <file>',
      'list the cluster objects from the API with this kubeconfig (in a pod: its service account)',
    )
    .option('--node-name <name>', 'this node in the cluster view (default: $NODE_NAME, else the hostname)')
    .option('--netns <name>', 'collect the network namespace NAME (/var/run/netns/NAME) or a path instead of this one')
    .addHelpText(
      'after',
      `
Examples:
  kubectl get svc,ingress,endpointslices,nodes -A -o json > cluster.json
  clbprobe collect --out /tmp/node-a --cluster-file cluster.json --node-name node-a
  clbprobe collect --out /tmp/node-a --kubeconfig ~/.kube/config   # objects listed from the API
  tar czf node-a.tgz -C /tmp node-a          # then, on a laptop:
  clbprobe diagnose --from node-a

Exit codes: 0 bundle written (see the summary for steps that failed), 2 the bundle could not be written.`,
    )
    .action(async (flags: CollectFlags) => {
      try {
        if (flags.clusterFile && flags.kubeconfig)
          throw new UserError('collect: give --cluster-file or --kubeconfig, not both');
        if (flags.clusterFile && !existsSync(flags.clusterFile))
          throw new UserError(`--cluster-file: no such file: ${flags.clusterFile}`);
        const { collectBundle } = await import('../source/bundle-collect.js');
        const netns = flags.netns ? netnsPath(flags.netns) : undefined;
        const manifest = await collectBundle({ ...flags, netns });
        process.stdout.write(summary(manifest, flags.out));
      } catch (e) {
        fail(
          e instanceof Error && 'code' in e && typeof e.code === 'string' && /^E[A-Z]+$/.test(e.code)
            ? new UserError(`collect: ${e.message}`)
            : e,
        );
      }
    });
}
