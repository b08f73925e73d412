// `clbprobe diagnose`: per Service, whether LB loopback can happen or is
// happening on this node, the proof and the fix. Reads this node (or a
// bundle), streams conntrack through the correlator, renders the findings.
import { Command } from 'commander';
import { hostname } from 'node:os';
import { BundleDirError, readBundle } from '../bundle/read.js';
import { loadClusterFile, ClusterFileError } from '../cluster/file.js';
import type { ClusterWatch } from '../cluster/watch.js';
import type { ClusterView } from '../cluster/types.js';
import { Diagnosis, hasActive } from '../detect/index.js';
import { diagnoseInputOf } from '../detect/input.js';
import { renderJson, renderText, wantColor } from '../detect/render.js';
import type { DiagnoseResult } from '../detect/types.js';
import { dumpConntrack } from '../kernel/conntrack/dump.js';
import { takeSnapshot } from '../kernel/snapshot.js';
import { EXIT_FINDING, EXIT_OK, UserError, fail } from './errors.js';
import { netnsPath } from './netns.js';

interface DiagnoseFlags {
  json?: boolean;
  nodeName?: string;
  clusterFile?: string;
  kubeconfig?: string;
  apiTimeout?: string;
  netns?: string;
  from?: string;
}

/** The cluster view: from --cluster-file, else one list of the API (kubeconfig or in-cluster). */
async function loadCluster(flags: DiagnoseFlags, nodeName: string): Promise<ClusterView> {
  if (flags.clusterFile) {
    try {
      return loadClusterFile(flags.clusterFile, { nodeName });
    } catch (e) {
      if (e instanceof ClusterFileError) throw new UserError(e.message);
      throw e;
    }
  }
  // Loaded on demand: --cluster-file and --from runs need no API client.
  const { ClusterWatch: Watch } = await import('../cluster/watch.js');
  let watch: ClusterWatch;
  try {
    watch = new Watch({ nodeName, ...(flags.kubeconfig ? { kubeconfig: flags.kubeconfig } : {}) });
  } catch (e) {
    throw new UserError(`diagnose: no cluster source: ${e instanceof Error ? e.message : String(e)}`);
  }
  const timeoutS = Number(flags.apiTimeout ?? 20);
  let timer: NodeJS.Timeout | undefined;
  try {
    watch.start();
    return await Promise.race([
      watch.synced(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new UserError(`diagnose: the Kubernetes API did not answer within ${timeoutS} s: ${watch.status().reason ?? ''}`)),
          timeoutS * 1000,
        );
      }),
    ]);
  } finally {
    clearTimeout(timer);
    await watch.stop();
  }
}

/** Reads this node live and diagnoses it; conntrack is streamed, never held whole. */
export async function runLive(flags: DiagnoseFlags, nodeName: string): Promise<DiagnoseResult> {
  const cluster = await loadCluster(flags, nodeName);
  const netns = flags.netns ? netnsPath(flags.netns) : undefined;
  const ns = netns ? { netns } : {};
  const node = await takeSnapshot(ns);
  const warnings: string[] = [];
  const diag = new Diagnosis(diagnoseInputOf(node, cluster, warnings));
  try {
    await dumpConntrack((batch) => batch.forEach((e) => diag.add(e)), ns);
    diag.conntrackSeen();
  } catch (e) {
    warnings.push(`conntrack not streamed: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (!cluster.node) warnings.push(`node ${nodeName} not found in the cluster view: pod CIDRs taken from bridge addresses`);
  return diag.finish();
}

/** Diagnoses an offline bundle (collected by `clbprobe collect`, or made by hand). */
export function runFromBundle(flags: DiagnoseFlags): { result: DiagnoseResult; nodeName: string } {
  let b;
  try {
    b = readBundle(flags.from!, {
      ...(flags.nodeName ? { nodeName: flags.nodeName } : {}),
      ...(flags.clusterFile ? { clusterFile: flags.clusterFile } : {}),
    });
  } catch (e) {
    if (e instanceof BundleDirError) throw new UserError(e.message);
    throw e;
  }
  if (!b.cluster) {
    throw new UserError(
      `diagnose: bundle ${flags.from} has no cluster.json; add one or pass --cluster-file FILE ` +
        '(kubectl get svc,ingress,endpointslices,nodes -A -o json > FILE)',
    );
  }
  const nodeName = b.nodeName?.name ?? flags.nodeName ?? '(unknown node)';
  const warnings = [...b.warnings];
  const diag = new Diagnosis(diagnoseInputOf(b.node, b.cluster, warnings));
  if (b.node.conntrack?.entries) {
    for (const e of b.node.conntrack.entries) diag.add(e);
    diag.conntrackSeen();
  }
  return { result: diag.finish(), nodeName };
}

export function register(program: Command): void {
  program
    .command('diagnose')
    .description(
      'Tell, per LoadBalancer/Ingress Service, whether LB loopback can happen or is happening on this node:\n' +
        'the mechanism (L4-loop, L7-loop, no-SNAT, hc-drop, port-refused, local-no-ep, direct-pod, drift),\n' +
        'the evidence (conntrack entries, addresses, IPVS and NAT rules) and the fix. Needs root or CAP_NET_ADMIN.',
    )
    .option('--cluster-file <file>', 'Services, EndpointSlices, Ingresses and Nodes as `kubectl get ... -o json` wrote them')
    .option('--kubeconfig <file>', 'read the cluster from the API with this kubeconfig (default without --cluster-file: in-cluster service account)')
    .option('--api-timeout <seconds>', 'give up on the API after this long', '20')
    .option('--node-name <name>', 'this node in the cluster view (default: $NODE_NAME, else the hostname)')
    .option('--json', 'print findings and warnings as JSON')
    .option('--netns <name>', 'diagnose the network namespace NAME (/var/run/netns/NAME) or a path instead of this one')
    .option('--from <dir>', 'diagnose an offline bundle (clbprobe collect --out DIR, or standard command outputs; see src/bundle/README.md)')
    .addHelpText(
      'after',
      `
Examples:
  kubectl get svc,ingress,endpointslices,nodes -A -o json > cluster.json
  clbprobe diagnose --cluster-file cluster.json --node-name node-1
  clbprobe diagnose --cluster-file cluster.json --json | jq '.findings[] | select(.severity=="active")'
  clbprobe diagnose --from ./node-a-bundle               a bundle collected on (or hand-made from) another node

Exit codes: 0 nothing active, 1 an active loopback was found (conntrack shows it), 2 errors.`,
    )
    .action(async (flags: DiagnoseFlags) => {
      try {
        let nodeName = flags.nodeName ?? process.env.NODE_NAME ?? hostname();
        let result: DiagnoseResult;
        if (flags.from) {
          if (flags.netns) throw new UserError('diagnose: --from and --netns exclude each other');
          ({ result, nodeName } = runFromBundle(flags));
        } else {
          result = await runLive(flags, nodeName);
        }
        process.stdout.write(
          flags.json ? renderJson(result, nodeName) : renderText(result, { color: wantColor(process.stdout), nodeName }),
        );
        process.exitCode = hasActive(result.findings) ? EXIT_FINDING : EXIT_OK;
      } catch (e) {
        fail(e);
      }
    });
}
