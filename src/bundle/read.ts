// readBundle(dir): a bundle directory (written by `clbprobe collect`, or by an
// SRE with standard commands under the names of src/bundle/README.md) back
// into the NodeSnapshot and ClusterView the detectors read. Each file is read
// on its own: a missing or malformed one becomes a warning naming the file
// (and line) and an unavailable source, never the end of the reading.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ClusterFileError, readClusterFile } from '../cluster/file.js';
import { buildClusterView } from '../cluster/build.js';
import type { ClusterView } from '../cluster/types.js';
import { SummaryCounter } from '../kernel/conntrack/dump.js';
import { mergeIpvsSnapshots } from '../kernel/ipvs/merge.js';
import { parseIpvsadm } from '../kernel/ipvs/ipvsadm-text.js';
import { chooseBackend, type BackendOutput } from '../kernel/nat/backend.js';
import { parseIpsetList, parseIpsetSave } from '../kernel/nat/ipset.js';
import { parseIptablesSave } from '../kernel/nat/iptables-save.js';
import type { BackendChoice, IpsetDump, IptablesDump, NatSnapshot, XtablesBackend } from '../kernel/nat/types.js';
import type { IpvsSnapshot, NodeSnapshot, SourceStatus } from '../kernel/types.js';
import { isKubeProxyInfo, MANIFEST_FILE, parseManifest, type BundleManifest, type KubeProxyInfo } from './manifest.js';
import { BUNDLE_FILES, backendSaveFile } from './names.js';
import { nodeNameByAddress } from './node-name.js';
import { parseConntrackText } from './parse-conntrack.js';
import { parseIpAddrJson, parseIpRouteJson, summarizeRoutes, type RouteInfo, type RouteSnapshot } from './parse-ip.js';
import { parseSysctl, type SysctlSnapshot } from './parse-sysctl.js';

export interface BundleRead {
  node: NodeSnapshot;
  cluster?: ClusterView;
  /** Routes with the uplink and pod CIDR candidates (ip-route.json / ip6-route.json). */
  routes?: RouteSnapshot;
  sysctls?: SysctlSnapshot;
  /** kube-proxy's mode as collect found it from its process (kube-proxy.json). */
  kubeProxy?: KubeProxyInfo;
  manifest?: BundleManifest;
  /** The node name used to mark local endpoints, and where it came from. */
  nodeName?: { name: string; from: string };
  /** Everything that could not be read, each naming its file (and line). */
  warnings: string[];
}

export interface ReadBundleOptions {
  /** This node in the cluster view; default: the manifest's, else the Node whose address is on this node. */
  nodeName?: string;
  /** A cluster file to use instead of the bundle's cluster.json. */
  clusterFile?: string;
}

/** Thrown only when dir is not a readable directory. */
export class BundleDirError extends Error {}

export function readBundle(dir: string, opts: ReadBundleOptions = {}): BundleRead {
  let names: string[];
  try {
    if (!statSync(dir).isDirectory()) throw new Error('not a directory');
    names = readdirSync(dir);
  } catch (e) {
    throw new BundleDirError(`bundle ${dir}: ${e instanceof Error ? e.message.replace(/^[A-Z]+: /, '') : String(e)}`);
  }
  const b = new BundleFiles(dir, names);
  const warnings: string[] = [];
  const sources: SourceStatus[] = [];
  const guard = <T>(source: SourceStatus['source'], fn: () => T | undefined): T | undefined => {
    const t0 = performance.now();
    try {
      return fn();
    } catch (e) {
      const reason = e instanceof Error ? e.message : String(e);
      warnings.push(reason);
      sources.push({ source, available: false, reason, durationMs: performance.now() - t0 });
      return undefined;
    }
  };
  const absent = (source: SourceStatus['source'], what: string): undefined => {
    sources.push({ source, available: false, reason: b.whyMissing(what) });
    return undefined;
  };
  const ok = (source: SourceStatus['source'], w: string[], reason?: string): void => {
    warnings.push(...w);
    sources.push({ source, available: true, ...(reason ? { reason } : {}) });
  };

  const manifest = readManifest(b, warnings);
  b.manifest = manifest;
  // Output kept from a command that failed (a timeout, a partial dump) may be cut short.
  for (const f of manifest?.files ?? []) {
    if (f.file && b.has(f.file) && f.exitStatus !== undefined && f.exitStatus !== 0) {
      warnings.push(`${b.path(f.file)}: written by \`${f.command}\`, which failed (${f.error ?? `exit ${f.exitStatus}`}): it may be incomplete`);
    }
  }
  const addresses = b.has(BUNDLE_FILES.ipAddr)
    ? guard('addresses', () => {
        const r = parseIpAddrJson(b.text(BUNDLE_FILES.ipAddr), b.path(BUNDLE_FILES.ipAddr));
        ok('addresses', r.warnings);
        return r.value;
      })
    : absent('addresses', BUNDLE_FILES.ipAddr);
  const routes = readRoutes(b, guard, ok, absent);
  const ipvs = readIpvsFiles(b, guard, ok, absent);
  const nat = readNatFiles(b, guard, ok, absent);
  const conntrack = b.has(BUNDLE_FILES.conntrack)
    ? guard('conntrack', () => {
        const r = parseConntrackText(b.text(BUNDLE_FILES.conntrack), b.path(BUNDLE_FILES.conntrack));
        const counter = new SummaryCounter();
        r.entries.forEach((e) => counter.add(e));
        ok('conntrack', r.warnings);
        return { summary: counter.summary, entries: r.entries };
      })
    : absent('conntrack', BUNDLE_FILES.conntrack);
  const sysctls = b.has(BUNDLE_FILES.sysctl)
    ? guard('sysctl', () => {
        const r = parseSysctl(b.text(BUNDLE_FILES.sysctl), b.path(BUNDLE_FILES.sysctl));
        ok('sysctl', r.warnings);
        return r.value;
      })
    : absent('sysctl', BUNDLE_FILES.sysctl);
  const kubeProxy = b.has(BUNDLE_FILES.kubeProxy) ? readKubeProxy(b, warnings) : manifest?.kubeProxy;

  const node: NodeSnapshot = {
    takenAt: manifest?.startedAt ?? b.newestMtime(),
    hostname: manifest?.hostname ?? '',
    kernel: (b.has(BUNDLE_FILES.uname) ? b.text(BUNDLE_FILES.uname).split('\n')[0]?.trim() : undefined) || manifest?.kernel || '',
    sources,
  };
  if (addresses) node.addresses = addresses;
  if (ipvs) node.ipvs = ipvs;
  if (conntrack) node.conntrack = conntrack;
  if (nat) node.nat = nat;

  const result: BundleRead = { node, warnings };
  const clusterPath = opts.clusterFile ?? (b.has(BUNDLE_FILES.cluster) ? b.path(BUNDLE_FILES.cluster) : undefined);
  if (clusterPath) {
    const c = readCluster(clusterPath, opts.nodeName ?? manifest?.nodeName, node, sources, warnings);
    if (c) {
      result.cluster = c.view;
      if (c.nodeName) result.nodeName = c.nodeName;
    }
  } else {
    absent('cluster', BUNDLE_FILES.cluster);
  }
  if (routes) result.routes = routes;
  if (sysctls) result.sysctls = sysctls;
  if (kubeProxy) result.kubeProxy = kubeProxy;
  if (manifest) result.manifest = manifest;
  return result;
}

type Guard = <T>(source: SourceStatus['source'], fn: () => T | undefined) => T | undefined;
type Ok = (source: SourceStatus['source'], warnings: string[], reason?: string) => void;
type Absent = (source: SourceStatus['source'], what: string) => undefined;

/**
 * Largest bundle file read. A conntrack dump of a 1M-entry table is ~300 MB; past this a file is
 * refused with its size (that source then says why it is unknown) instead of the read dying on
 * V8's string limit (~512 MiB) or the machine's memory.
 */
export const MAX_BUNDLE_FILE = 400 << 20;

/** The directory's files, read once, with the manifest's word on missing ones. */
class BundleFiles {
  manifest: BundleManifest | undefined;
  constructor(
    readonly dir: string,
    readonly names: string[],
  ) {}
  has(name: string): boolean {
    return this.names.includes(name);
  }
  path(name: string): string {
    return join(this.dir, name);
  }
  text(name: string): string {
    try {
      const size = statSync(this.path(name)).size;
      if (size > MAX_BUNDLE_FILE) throw new Error(`${size} bytes, more than the ${MAX_BUNDLE_FILE >> 20} MiB clbprobe reads of one file`);
      return readFileSync(this.path(name), 'utf8');
    } catch (e) {
      throw new Error(`${this.path(name)}: cannot read: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  /** Why a file is not there: the manifest's error for the command that should have written it, if any. */
  whyMissing(what: string): string {
    const step = this.manifest?.files.find((f) => f.file === what || (f.error && commandWrites(f.command, what)));
    if (step?.error) return `${what} not in the bundle: ${step.command}: ${step.error}`;
    return `${what} not in the bundle (see src/bundle/README.md for the command that makes it)`;
  }
  newestMtime(): string {
    let newest = 0;
    for (const n of this.names) {
      try {
        newest = Math.max(newest, statSync(this.path(n)).mtimeMs);
      } catch {
        // vanished meanwhile: ignore
      }
    }
    return new Date(newest || Date.now()).toISOString();
  }
}

/** Whether a manifest command is the one behind a bundle file name (e.g. 'ipvsadm-save -n' → ipvsadm-save.txt). */
function commandWrites(command: string, file: string): boolean {
  const base = file.replace(/\.(txt|json)$/, '');
  return command.split(' ').some((w) => w === base || base.startsWith(w));
}

function readRoutes(b: BundleFiles, guard: Guard, ok: Ok, absent: Absent): RouteSnapshot | undefined {
  const files = ([[BUNDLE_FILES.ipRoute, 4], [BUNDLE_FILES.ip6Route, 6]] as const).filter(([f]) => b.has(f));
  if (files.length === 0) return absent('routes', BUNDLE_FILES.ipRoute);
  return guard('routes', () => {
    const all: RouteInfo[] = [];
    const w: string[] = [];
    for (const [f, fam] of files) {
      const r = parseIpRouteJson(b.text(f), b.path(f), fam);
      all.push(...r.value);
      w.push(...r.warnings);
    }
    const s = summarizeRoutes(all);
    ok('routes', w, s.uplink || s.uplink6 ? undefined : 'no default route: the uplink is unknown');
    return s;
  });
}

function readIpvsFiles(b: BundleFiles, guard: Guard, ok: Ok, absent: Absent): IpvsSnapshot | undefined {
  const texts = b.names.filter((n) => /^ipvsadm.*\.txt$/.test(n)).sort();
  if (texts.length > 0) {
    return guard('ipvs', () => {
      // Each file on its own, so one bad view does not lose the others.
      const parts: IpvsSnapshot[] = [];
      const w: string[] = [];
      for (const f of texts) {
        try {
          parts.push(parseIpvsadm([{ source: b.path(f), text: b.text(f) }]));
        } catch (e) {
          w.push(e instanceof Error ? e.message : String(e));
        }
      }
      if (parts.length === 0) throw new Error(w.join('; '));
      ok('ipvs', w);
      return mergeIpvsSnapshots(parts);
    });
  }
  if (b.has(BUNDLE_FILES.ipvsJson)) {
    return guard('ipvs', () => {
      const snap = JSON.parse(b.text(BUNDLE_FILES.ipvsJson)) as IpvsSnapshot;
      if (!Array.isArray(snap?.virtualServers)) throw new Error(`${b.path(BUNDLE_FILES.ipvsJson)}: no "virtualServers" array`);
      ok('ipvs', []);
      return snap;
    });
  }
  return absent('ipvs', BUNDLE_FILES.ipvsadmSave);
}

/** kube-proxy's backend from both backends' files (as the live reader chooses), else from iptables-save.txt's header. */
function readNatFiles(b: BundleFiles, guard: Guard, ok: Ok, absent: Absent): NatSnapshot | undefined {
  const perBackend = (['legacy', 'nft'] as const).some((k) => b.has(backendSaveFile(k, 4)) || b.has(backendSaveFile(k, 6)));
  const plain = b.has(BUNDLE_FILES.iptablesSave) || b.has(BUNDLE_FILES.ip6tablesSave);
  const ipsets = b.has(BUNDLE_FILES.ipset)
    ? guard('ipset', () => {
        const text = b.text(BUNDLE_FILES.ipset);
        const path = b.path(BUNDLE_FILES.ipset);
        const dump: IpsetDump = /^\s*Name: /m.test(text) ? parseIpsetList(text, path) : parseIpsetSave(text, path);
        ok('ipset', dump.warnings);
        return dump;
      })
    : absent('ipset', BUNDLE_FILES.ipset);
  if (!perBackend && !plain) return absent('nat', BUNDLE_FILES.iptablesSave);
  return guard('nat', () => {
    let backend: XtablesBackend;
    let choice: BackendChoice;
    let files: Record<4 | 6, string>;
    if (perBackend) {
      const out = (k: XtablesBackend): BackendOutput => {
        const present = ([4, 6] as const).map((f) => backendSaveFile(k, f)).filter((f) => b.has(f));
        return present.length > 0 ? { texts: present.map((f) => b.text(f)) } : { texts: [], error: `${backendSaveFile(k, 4)} not in the bundle` };
      };
      choice = chooseBackend(out('legacy'), out('nft'));
      backend = choice.backend;
      files = { 4: backendSaveFile(backend, 4), 6: backendSaveFile(backend, 6) };
    } else {
      const header = [BUNDLE_FILES.iptablesSave, BUNDLE_FILES.ip6tablesSave].filter((f) => b.has(f)).map((f) => b.text(f)).join('\n');
      backend = /^# Generated by ip6?tables(-nft)?-save .*\(nf_tables\)/m.test(header) ? 'nft' : 'legacy';
      const ev = { ruleLines: 0, kubeRuleLines: 0, kubeletChains: false };
      choice = { backend, reason: `one iptables-save output; its header says ${backend}`, legacy: ev, nft: ev };
      files = { 4: BUNDLE_FILES.iptablesSave, 6: BUNDLE_FILES.ip6tablesSave };
    }
    const dump = (fam: 4 | 6): IptablesDump | undefined =>
      b.has(files[fam]) ? parseIptablesSave(b.text(files[fam]), { source: b.path(files[fam]), family: fam }) : undefined;
    const v4 = dump(4);
    const v6 = dump(6);
    const notes: string[] = [];
    if (!v4) notes.push(`${files[4]} not in the bundle: no IPv4 rules`);
    const nat: NatSnapshot = { backend, backendChoice: choice, ...(v4 ? { v4 } : {}), ...(v6 ? { v6 } : {}), ...(ipsets ? { ipsets } : {}), warnings: notes };
    ok('nat', [...(v4?.warnings ?? []), ...(v6?.warnings ?? []), ...notes], choice.reason);
    return nat;
  });
}

/** A bad manifest is only a warning: the files can be read without it. */
function readManifest(b: BundleFiles, warnings: string[]): BundleManifest | undefined {
  if (!b.has(MANIFEST_FILE)) return undefined;
  try {
    return parseManifest(b.text(MANIFEST_FILE), b.path(MANIFEST_FILE), warnings);
  } catch (e) {
    warnings.push(`${e instanceof Error ? e.message : String(e)}; read without it`);
    return undefined;
  }
}

function readKubeProxy(b: BundleFiles, warnings: string[]): KubeProxyInfo | undefined {
  try {
    const k: unknown = JSON.parse(b.text(BUNDLE_FILES.kubeProxy));
    if (!isKubeProxyInfo(k)) throw new Error('no "source" text, or a "mode" that is not text');
    return k;
  } catch (e) {
    warnings.push(`${b.path(BUNDLE_FILES.kubeProxy)}: ${e instanceof Error ? e.message : String(e)}; ignored`);
    return undefined;
  }
}

/** The cluster view seen from this node; the node name from the options/manifest, else by matching addresses. */
function readCluster(
  path: string,
  given: string | undefined,
  node: NodeSnapshot,
  sources: SourceStatus[],
  warnings: string[],
): { view: ClusterView; nodeName?: { name: string; from: string } } | undefined {
  const t0 = performance.now();
  try {
    const { objects, warnings: fileWarnings } = readClusterFile(path);
    const found = given ? { name: given, from: 'given' } : nodeNameByAddress(objects.nodes, node.addresses);
    const view = buildClusterView(objects, { ...(found ? { nodeName: found.name } : {}), warnings: fileWarnings });
    if (!found) warnings.push(`${path}: no Node has an address of this node and no node name was given: no endpoint counts as local`);
    warnings.push(...view.warnings.map((w) => `${path}: ${w}`));
    sources.push({ source: 'cluster', available: true, durationMs: performance.now() - t0 });
    return { view, ...(found ? { nodeName: found } : {}) };
  } catch (e) {
    const reason = e instanceof ClusterFileError ? e.message : `${path}: ${e instanceof Error ? e.message : String(e)}`;
    warnings.push(reason);
    sources.push({ source: 'cluster', available: false, reason, durationMs: performance.now() - t0 });
    return undefined;
  }
}
