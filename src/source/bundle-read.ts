// readBundle(dir): a bundle back into NodeSnapshot and ClusterView; a bad or missing file is a warning, a source down.
import { readdirSync, statSync } from 'node:fs';
import { BundleFiles } from '../bundle/files.js';
import {
  type BundleManifest,
  isKubeProxyInfo,
  type KubeProxyInfo,
  MANIFEST_FILE,
  type ManifestEntry,
  parseManifest,
} from '../bundle/manifest.js';
import { BUNDLE_FILES } from '../bundle/names.js';
import type { RouteSnapshot } from '../bundle/parse-ip.js';
import type { SysctlSnapshot } from '../bundle/parse-sysctl.js';
import { buildClusterView } from '../cluster/build.js';
import { ClusterFileError, readClusterFile } from '../cluster/file.js';
import { lbHostnamesOf, withLbHostnames } from '../cluster/lb-hostnames.js';
import type { SourcedObject } from '../cluster/objects.js';
import type { ClusterView } from '../cluster/types.js';
import { errText } from '../errors.js';
import { canonicalIP, ipFamily } from '../kernel/ip.js';
import type { AddressSnapshot } from '../kernel/types.js';
import type { SourceStatus } from '../model/source-status.js';
import { bundleReader } from './contract.js';
import { lookupsByName } from './dns.js';
import { SOURCES } from './list.js';
import type { NodeSnapshot } from './node-snapshot.js';
import { SourceRunner } from './runner.js';

export { MAX_BUNDLE_FILE } from '../bundle/files.js';

export type BundleRead = ReturnType<typeof readBundle>;

/** Where the node name that marks local endpoints came from. */
type NodeNameFound = { name: string; from: string };

/** Thrown only when dir is not a readable directory. */
export class BundleDirError extends Error {}

/** A bundle read for diagnosis, with warnings that name the file (and line) that could not be read. */
export function readBundle(
  dir: string,
  opts: {
    /** This node in the cluster view (default: the manifest's, else the Node with an address bound here). */
    nodeName?: string;
    /** Replaces the bundle's cluster.json. */
    clusterFile?: string;
  } = {},
) {
  let names: string[];
  try {
    if (!statSync(dir).isDirectory()) throw new Error('not a directory');
    names = readdirSync(dir);
  } catch (e) {
    throw new BundleDirError(`bundle ${dir}: ${e instanceof Error ? e.message.replace(/^[A-Z]+: /, '') : String(e)}`);
  }
  const b = new BundleFiles(dir, names);
  const warnings: string[] = [];
  const manifest = readManifest(b, warnings);
  b.manifest = manifest;
  // Output kept from a command that failed (a timeout, a partial dump) may be cut short.
  for (const f of manifest?.files ?? []) {
    if (!f.file || !b.has(f.file)) continue;
    if (f.exitStatus !== undefined && f.exitStatus !== 0) {
      warnings.push(
        `${b.path(f.file)}: written by \`${f.command}\`, which failed ` +
          `(${f.error ?? `exit ${f.exitStatus}`}): it may be incomplete`,
      );
    } else if (f.incomplete) {
      warnings.push(`${b.path(f.file)}: written by \`${f.command}\`, which partly failed (${f.error ?? 'no reason'})`);
    }
  }
  // The bundle is one more implementation of the sources: the same list, the same runner.
  const runner = new SourceRunner();
  for (const def of SOURCES) {
    if (!def.fromBundle) continue;
    const { result } = runner.readSync(bundleReader(def, b));
    if (result.state !== 'unchanged') warnings.push(...(result.warnings ?? []));
  }
  const kubeProxy = b.has(BUNDLE_FILES.kubeProxy) ? readKubeProxy(b, warnings) : manifest?.kubeProxy;

  const node = runner.snapshot({
    takenAt: manifest?.startedAt ?? b.newestMtime(),
    hostname: manifest?.hostname ?? '',
    kernel:
      (b.has(BUNDLE_FILES.uname) ? b.text(BUNDLE_FILES.uname).split('\n')[0]?.trim() : undefined) ||
      manifest?.kernel ||
      '',
  });
  const clusterPath = opts.clusterFile || (b.has(BUNDLE_FILES.cluster) ? b.path(BUNDLE_FILES.cluster) : undefined);
  const clusterEntry = opts.clusterFile ? undefined : manifest?.files.find((f) => f.file === BUNDLE_FILES.cluster);
  const cluster = clusterPath
    ? readCluster(clusterPath, opts.nodeName || manifest?.nodeName, node, warnings, clusterEntry ?? {})
    : undefined;
  if (!clusterPath)
    node.sources.push({ source: 'cluster', available: false, reason: b.whyMissing(BUNDLE_FILES.cluster) });
  const routes = runner.value<RouteSnapshot>('routes');
  const sysctls = runner.value<SysctlSnapshot>('sysctl');
  return {
    node,
    ...(cluster ? { cluster: withBundleLookups(cluster.view, node, b) } : {}),
    ...(cluster?.nodeName ? { nodeName: cluster.nodeName } : {}),
    ...(routes ? { routes } : {}),
    ...(sysctls ? { sysctls } : {}),
    ...(kubeProxy ? { kubeProxy } : {}),
    ...(manifest ? { manifest } : {}),
    warnings,
  };
}

/** Applies dns-lookups.json to hostname-only LBs; unanswered names leave the dns source down (unknown, not empty). */
function withBundleLookups(view: ClusterView, node: NodeSnapshot, files: BundleFiles): ClusterView {
  const names = lbHostnamesOf(view);
  const i = node.sources.findIndex((s) => s.source === 'dns');
  const before = node.sources[i];
  if (names.length === 0) {
    // Nothing to resolve: absent for that reason, whatever the bundle holds.
    if (before?.notPresent)
      node.sources[i] = { ...before, reason: 'no hostname-only LoadBalancer Service in the cluster view' };
    return view;
  }
  const lookups = lookupsByName(node.dns);
  const unanswered = names.filter((n) => !lookups.has(n));
  if (unanswered.length > 0) {
    const why =
      lookups.size === 0
        ? (before?.reason ?? files.whyMissing(BUNDLE_FILES.dnsLookups))
        : `${files.path(BUNDLE_FILES.dnsLookups)} has no answer for them`;
    const status: SourceStatus = {
      source: 'dns',
      available: false,
      reason:
        `${unanswered.length} of ${names.length} hostname-only LB names not answered ` +
        `(${unanswered.slice(0, 3).join(', ')}${unanswered.length > 3 ? ', ...' : ''}): ${why}`,
    };
    if (before) node.sources[i] = status;
    else node.sources.push(status);
  }
  return withLbHostnames(view, lookups);
}

/** A bad manifest is only a warning: the files can be read without it. */
function readManifest(files: BundleFiles, warnings: string[]): BundleManifest | undefined {
  if (!files.has(MANIFEST_FILE)) return undefined;
  try {
    return parseManifest(files.text(MANIFEST_FILE), files.path(MANIFEST_FILE), warnings);
  } catch (e) {
    warnings.push(`${errText(e)}; read without it`);
    return undefined;
  }
}

function readKubeProxy(files: BundleFiles, warnings: string[]): KubeProxyInfo | undefined {
  try {
    const k: unknown = JSON.parse(files.text(BUNDLE_FILES.kubeProxy));
    if (!isKubeProxyInfo(k)) throw new Error('no "source" text, or a "mode" that is not text');
    return k;
  } catch (e) {
    warnings.push(`${files.path(BUNDLE_FILES.kubeProxy)}: ${errText(e)}; ignored`);
    return undefined;
  }
}

/**
 * The cluster view seen from this node; the node name from the options/manifest, else by matching addresses.
 * `incomplete`: the collections `collect` could not list, which leave the cluster source down though the rest is read.
 */
function readCluster(
  path: string,
  given: string | undefined,
  node: NodeSnapshot,
  warnings: string[],
  { incomplete, error }: Pick<ManifestEntry, 'incomplete' | 'error'>,
): { view: ClusterView; nodeName?: NodeNameFound } | undefined {
  const t0 = performance.now();
  try {
    const { objects, warnings: fileWarnings } = readClusterFile(path);
    const found = given ? { name: given, from: 'given' } : nodeNameByAddress(objects.nodes, node.addresses);
    const view = buildClusterView(objects, { ...(found ? { nodeName: found.name } : {}), warnings: fileWarnings });
    if (!found)
      warnings.push(
        `${path}: no Node has an address of this node and no node name was given: no endpoint counts as local`,
      );
    warnings.push(...view.warnings.map((w) => `${path}: ${w}`));
    const durationMs = performance.now() - t0;
    // Missing EndpointSlices would read as Services without endpoints: not a view to diagnose from as if whole.
    if (incomplete)
      node.sources.push({
        source: 'cluster',
        available: false,
        reason: `${path} is incomplete: ${error ?? 'no reason'}`,
        durationMs,
      });
    else node.sources.push({ source: 'cluster', available: true, durationMs });
    return { view, ...(found ? { nodeName: found } : {}) };
  } catch (e) {
    const reason = e instanceof ClusterFileError ? e.message : `${path}: ${errText(e)}`;
    warnings.push(reason);
    node.sources.push({ source: 'cluster', available: false, reason, durationMs: performance.now() - t0 });
    return undefined;
  }
}

/** The Node whose status.addresses holds an address bound here (kube-ipvs0's VIPs excluded: every node has those). */
function nodeNameByAddress(nodes: readonly SourcedObject[], addresses?: AddressSnapshot): NodeNameFound | undefined {
  const local = new Set<string>();
  for (const iface of addresses?.interfaces ?? []) {
    if (iface.isKubeIpvs || iface.name === 'lo') continue;
    for (const a of iface.addresses) local.add(a.address);
  }
  for (const { object } of nodes) {
    const o = object as { metadata?: { name?: unknown }; status?: { addresses?: unknown } };
    const name = o?.metadata?.name;
    const list = o?.status?.addresses;
    if (typeof name !== 'string' || !Array.isArray(list)) continue;
    for (const a of list as { type?: unknown; address?: unknown }[]) {
      if (typeof a?.address !== 'string' || ipFamily(a.address) === 0) continue;
      if (local.has(canonicalIP(a.address)))
        return { name, from: `Node ${name} has ${a.type ?? 'address'} ${a.address}, bound on this node` };
    }
  }
  return undefined;
}
