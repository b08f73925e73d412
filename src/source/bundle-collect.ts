// `clbprobe collect`: an offline bundle for `diagnose --from DIR`, each file one standard command's output
// (src/bundle/README.md), each step recorded in manifest.json, and a failing one never stops the others.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { listClusterObjects } from '../bundle/cluster-list.js';
import { findKubeProxy } from '../bundle/kube-proxy.js';
import {
  BUNDLE_FORMAT,
  type BundleManifest,
  clbprobeVersion,
  MANIFEST_FILE,
  type ManifestEntry,
} from '../bundle/manifest.js';
import { BUNDLE_FILES } from '../bundle/names.js';
import { bundleWriter, ms, runToFile, writeStep } from '../bundle/writer.js';
import { buildClusterView } from '../cluster/build.js';
import { MAX_CLUSTER_FILE, readClusterFile } from '../cluster/file.js';
import { lbHostnamesOf } from '../cluster/lb-hostnames.js';
import { errText } from '../errors.js';
import { readFileBounded } from '../read-bounded.js';
import { SOURCES } from './list.js';

export interface CollectOptions {
  /** Bundle directory; created if missing. */
  out: string;
  /** Path of a network namespace to collect instead of ours (/var/run/netns/NAME, /proc/PID/ns/net). */
  netns?: string;
  /** `kubectl get svc,ingress,endpointslices,nodes -A -o json` output to include as cluster.json. */
  clusterFile?: string;
  /** Without clusterFile: list the objects from the API with this kubeconfig (default: in-cluster, when in a pod). */
  kubeconfig?: string;
  /** Unset or empty: $NODE_NAME, else the hostname. */
  nodeName?: string;
  /** Per-command timeout; default 30 s. */
  timeoutMs?: number;
  /** Where to look for kube-proxy's process (tests); default /proc. */
  procRoot?: string;
}

export async function collectBundle(opts: CollectOptions): Promise<BundleManifest> {
  mkdirSync(opts.out, { recursive: true });
  const startedAt = new Date().toISOString();
  const files: ManifestEntry[] = [];
  const timeoutMs = opts.timeoutMs ?? 30_000;
  // The cluster view first: the dns source looks up the hostname-only LB names it publishes.
  if (opts.clusterFile) files.push(copyCluster(opts.clusterFile, opts.out));
  else if (opts.kubeconfig || process.env.KUBERNETES_SERVICE_HOST)
    files.push(await listCluster(opts.out, opts.kubeconfig));
  else
    files.push({
      command: 'cluster view',
      durationMs: 0,
      skipped: true,
      error: 'no --cluster-file or --kubeconfig given and not in a pod: the bundle has no cluster.json',
    });
  const lbHostnames = hostnamesOf(join(opts.out, BUNDLE_FILES.cluster));
  const w = bundleWriter(opts.out, files, { ...(opts.netns ? { netns: opts.netns } : {}), timeoutMs, lbHostnames });
  // Each source writes its own files (src/source/list.ts), in the list's order.
  for (const def of SOURCES) await def.collect?.(w);
  const uname = await runToFile(join(opts.out, BUNDLE_FILES.uname), BUNDLE_FILES.uname, ['uname', '-r'], timeoutMs);
  files.push(uname);
  const t0 = performance.now();
  const kubeProxy = findKubeProxy(opts.procRoot);
  const command = `kube-proxy process in ${opts.procRoot ?? '/proc'} (argv, --proxy-mode, --config mode)`;
  const json = `${JSON.stringify(kubeProxy, null, 2)}\n`;
  files.push(
    writeStep(opts.out, BUNDLE_FILES.kubeProxy, command, json, t0, kubeProxy.mode ? undefined : kubeProxy.source),
  );

  const kernel = uname.exitStatus === 0 ? readFirstLine(join(opts.out, BUNDLE_FILES.uname)) : undefined;
  const manifest: BundleManifest = {
    format: BUNDLE_FORMAT,
    clbprobeVersion: clbprobeVersion(),
    nodeName: opts.nodeName || process.env.NODE_NAME || hostname(),
    hostname: hostname(),
    ...(kernel ? { kernel } : {}),
    ...(opts.netns ? { netns: opts.netns } : {}),
    startedAt,
    endedAt: new Date().toISOString(),
    kubeProxy,
    files,
  };
  writeFileSync(join(opts.out, MANIFEST_FILE), `${JSON.stringify(manifest, null, 2)}\n`);
  return manifest;
}

/** --cluster-file into the bundle, to at most the bound the cluster file reader takes (a device never ends). */
export function copyCluster(from: string, out: string): ManifestEntry {
  const t0 = performance.now();
  const command = `copy of --cluster-file ${from}`;
  let entry: ManifestEntry;
  try {
    entry = writeStep(out, BUNDLE_FILES.cluster, command, readFileBounded(from, MAX_CLUSTER_FILE, 'cluster file'), t0);
  } catch (e) {
    return { command, durationMs: ms(t0), error: `cannot copy: ${errText(e)}` };
  }
  try {
    const { warnings } = readClusterFile(join(out, BUNDLE_FILES.cluster));
    if (warnings.length > 0) entry.error = warnings.join('; ');
  } catch (e) {
    entry.error = errText(e);
  }
  return entry;
}

/** cluster.json from the API; collections that fail are recorded, the others kept. */
export async function listCluster(out: string, kubeconfig: string | undefined): Promise<ManifestEntry> {
  const t0 = performance.now();
  const command =
    `list Services, EndpointSlices, Ingresses, Nodes from the API ` +
    `(${kubeconfig ? `kubeconfig ${kubeconfig}` : 'in-cluster'})`;
  try {
    const { KubeApi } = await import('../cluster/kube-api.js');
    const { loadApiTarget } = await import('../cluster/kube-config.js');
    const { list, errors, notes } = await listClusterObjects(new KubeApi(loadApiTarget(kubeconfig)));
    const json = `${JSON.stringify(list, null, 1)}\n`;
    // An optional kind not readable is said, but the list is whole for what a diagnosis reads.
    const said = [...errors, ...notes].join('; ') || undefined;
    const entry = writeStep(out, BUNDLE_FILES.cluster, command, json, t0, said);
    return errors.length === 0 ? entry : { ...entry, incomplete: true };
  } catch (e) {
    return { command, durationMs: ms(t0), error: errText(e) };
  }
}

/** The hostname-only LB names of the cluster.json just written; none when it is missing or unreadable. */
function hostnamesOf(path: string): string[] {
  try {
    return lbHostnamesOf(buildClusterView(readClusterFile(path).objects, {}));
  } catch {
    return [];
  }
}

function readFirstLine(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8').split('\n')[0]?.trim() || undefined;
  } catch {
    return undefined;
  }
}
