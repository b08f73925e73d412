// The diagnosis runner the CLI's `diagnose` (loaded only when it runs) and the demo share:
// reads this node (or a bundle), streams conntrack through the correlator, gives the findings.
import { writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { ClusterFileError, loadClusterFile } from '../cluster/file.js';
import { lbHostnamesOf, withLbHostnames } from '../cluster/lb-hostnames.js';
import type { ClusterView } from '../cluster/types.js';
import type { ClusterWatch } from '../cluster/watch.js';
import { Diagnosis, diagnose } from '../detect/index.js';
import { diagnoseInputOf } from '../detect/input.js';
import { type HtmlReportOptions, renderHtml } from '../detect/render-html.js';
import type { DiagnoseResult } from '../detect/types.js';
import { errText } from '../errors.js';
import { dumpConntrack, malformedNote } from '../kernel/conntrack/dump.js';
import { netnsPath } from '../netns-path.js';
import { BundleDirError, readBundle } from '../source/bundle-read.js';
import { lookupsByName } from '../source/dns.js';
import { takeSnapshot } from '../source/snapshot.js';
import { UserError } from '../user-error.js';

export interface DiagnoseFlags {
  json?: boolean;
  fixCommands?: boolean;
  html?: string;
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
    throw new UserError(`diagnose: no cluster source: ${errText(e)}`);
  }
  const timeoutS = Number(flags.apiTimeout ?? 20);
  const synced = new AbortController();
  const late = async (): Promise<never> => {
    await sleep(timeoutS * 1000, undefined, { signal: synced.signal });
    const reason = watch.status().reason ?? '';
    throw new UserError(`diagnose: the Kubernetes API did not answer within ${timeoutS} s: ${reason}`);
  };
  try {
    watch.start();
    return await Promise.race([watch.synced(), late()]);
  } finally {
    synced.abort();
    await watch.stop();
  }
}

/** A diagnosis, and whether conntrack was read in full: without it no loop can be shown active, nor ruled out. */
export interface RunResult {
  result: DiagnoseResult;
  conntrackRead: boolean;
}

/** Reads this node live and diagnoses it; conntrack is streamed, never held whole. */
export async function runLive(flags: DiagnoseFlags, nodeName: string): Promise<RunResult> {
  const listed = await loadCluster(flags, nodeName);
  const netns = flags.netns ? netnsPath(flags.netns) : undefined;
  const ns = netns ? { netns } : {};

  // Hostname-only LBs are looked up by the dns source with this node's (or the namespace's) resolver.
  const names = lbHostnamesOf(listed);
  const node = await takeSnapshot({ ...ns, ...(names.length > 0 ? { lbHostnames: () => names } : {}) });
  const cluster = withLbHostnames(listed, lookupsByName(node.dns));
  const warnings: string[] = [];
  const diag = new Diagnosis(diagnoseInputOf(node, cluster, warnings));
  let conntrackRead = false;
  try {
    const res = await dumpConntrack((batch) => {
      for (const e of batch) diag.add(e);
    }, ns);
    const skipped = malformedNote(res);
    if (skipped) warnings.push(`conntrack: ${skipped}`);
    diag.conntrackSeen();
    conntrackRead = true;
  } catch (e) {
    warnings.push(`conntrack not streamed: ${errText(e)}`);
  }
  if (!cluster.node)
    warnings.push(`node ${nodeName} not found in the cluster view: pod CIDRs taken from bridge addresses`);
  return { result: diag.finish(), conntrackRead };
}

/** Diagnoses an offline bundle (collected by `clbprobe collect`, or made by hand). */
export function runFromBundle(flags: DiagnoseFlags): RunResult & { nodeName: string } {
  let b: ReturnType<typeof readBundle>;
  try {
    b = readBundle(flags.from!, { nodeName: flags.nodeName, clusterFile: flags.clusterFile });
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
  const input = diagnoseInputOf(b.node, b.cluster, [...b.warnings]);
  const conntrack = b.node.conntrack?.entries;
  return { result: diagnose({ ...input, conntrack }), conntrackRead: conntrack !== undefined, nodeName };
}

/** Writes the HTML page of a diagnosis; a path that cannot be written is the user's to fix. */
export function writeHtmlReport(file: string, result: DiagnoseResult, options: HtmlReportOptions): void {
  try {
    writeFileSync(file, renderHtml(result, options));
  } catch (e) {
    throw new UserError(`diagnose --html: cannot write ${file}: ${errText(e)}`);
  }
}
