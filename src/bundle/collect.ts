// `clbprobe collect`: writes an offline bundle of this node (or of a network
// namespace) that `clbprobe diagnose --from DIR` reads elsewhere. Every file is
// one standard command's output, named as src/bundle/README.md describes, so
// the same reader also takes bundles an SRE made by hand. Each step is recorded
// in manifest.json; a missing tool, a permission problem or an absent kernel
// feature is written down there and never stops the other steps.
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { accessSync, constants, copyFileSync, createWriteStream, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { delimiter, join } from 'node:path';
import { readClusterFile } from '../cluster/file.js';
import { dumpConntrack } from '../kernel/conntrack/dump.js';
import { formatConntrack } from '../kernel/conntrack/format.js';
import { readIpvs } from '../kernel/ipvs/reader.js';
import { listClusterObjects } from './cluster-list.js';
import { findKubeProxy } from './kube-proxy.js';
import { BUNDLE_FORMAT, MANIFEST_FILE, clbprobeVersion, type BundleManifest, type ManifestEntry } from './manifest.js';
import { BUNDLE_FILES, backendSaveFile } from './names.js';

export interface CollectOptions {
  /** Bundle directory; created if missing. */
  out: string;
  /** Path of a network namespace to collect instead of ours (/var/run/netns/NAME, /proc/PID/ns/net). */
  netns?: string;
  /** `kubectl get svc,ingress,endpointslices,nodes -A -o json` output to include as cluster.json. */
  clusterFile?: string;
  /** Without clusterFile: list the objects from the API with this kubeconfig (default: in-cluster, when in a pod). */
  kubeconfig?: string;
  nodeName?: string;
  /** Per-command timeout; default 30 s. */
  timeoutMs?: number;
  /** Where to look for kube-proxy's process (tests); default /proc. */
  procRoot?: string;
}

/** Kernel-side keys kept from `sysctl -a`: what decides whether a looped packet survives. */
const SYSCTL_KEYS = /^net\.(ipv4\.conf\.[^.\s]+\.(rp_filter|route_localnet)|netfilter\.nf_conntrack_\w+)\s*=/;

export async function collectBundle(opts: CollectOptions): Promise<BundleManifest> {
  mkdirSync(opts.out, { recursive: true });
  const startedAt = new Date().toISOString();
  const files: ManifestEntry[] = [];
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const inNs = (argv: string[]): string[] => (opts.netns ? ['nsenter', `--net=${opts.netns}`, '--', ...argv] : argv);
  const run = async (file: string, argv: string[], filter?: (out: string) => string): Promise<ManifestEntry> => {
    const entry = await runToFile(join(opts.out, file), file, inNs(argv), timeoutMs, filter);
    files.push(entry);
    return entry;
  };
  const skip = (command: string, error: string): void => {
    files.push({ command, durationMs: 0, skipped: true, error });
  };

  await run(BUNDLE_FILES.ipAddr, ['ip', '-j', '-d', 'addr']);
  await run(BUNDLE_FILES.ipRoute, ['ip', '-j', 'route']);
  await run(BUNDLE_FILES.ip6Route, ['ip', '-6', '-j', 'route']);
  await collectIpvs(opts, run, skip, files);
  await collectIptables(run, skip);
  await run(BUNDLE_FILES.ipset, ['ipset', 'save']);
  files.push(await collectConntrack(opts, timeoutMs, inNs));
  await run(BUNDLE_FILES.sysctl, ['sysctl', '-a'], (out) =>
    out
      .split('\n')
      .filter((l) => SYSCTL_KEYS.test(l))
      .join('\n')
      .concat('\n'),
  );
  const uname = await runToFile(join(opts.out, BUNDLE_FILES.uname), BUNDLE_FILES.uname, ['uname', '-r'], timeoutMs);
  files.push(uname);
  if (opts.clusterFile) files.push(copyCluster(opts.clusterFile, opts.out));
  else if (opts.kubeconfig || process.env.KUBERNETES_SERVICE_HOST) files.push(await listCluster(opts.out, opts.kubeconfig));
  else skip('cluster view', 'no --cluster-file or --kubeconfig given and not in a pod: the bundle has no cluster.json');

  const t0 = performance.now();
  const kubeProxy = findKubeProxy(opts.procRoot);
  writeFileSync(join(opts.out, BUNDLE_FILES.kubeProxy), `${JSON.stringify(kubeProxy, null, 2)}\n`);
  files.push({
    file: BUNDLE_FILES.kubeProxy,
    command: `kube-proxy process in ${opts.procRoot ?? '/proc'} (argv, --proxy-mode, --config mode)`,
    durationMs: ms(t0),
    size: statSync(join(opts.out, BUNDLE_FILES.kubeProxy)).size,
    ...(kubeProxy.mode ? {} : { error: kubeProxy.source }),
  });

  const kernel = uname.exitStatus === 0 ? readFirstLine(join(opts.out, BUNDLE_FILES.uname)) : undefined;
  const manifest: BundleManifest = {
    format: BUNDLE_FORMAT,
    clbprobeVersion: clbprobeVersion(),
    nodeName: opts.nodeName ?? process.env.NODE_NAME ?? hostname(),
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

type Run = (file: string, argv: string[]) => Promise<ManifestEntry>;
type Skip = (command: string, error: string) => void;

/** ipvsadm's two views when IPVS and ipvsadm are there; our own genl dump when only ipvsadm is missing. */
async function collectIpvs(opts: CollectOptions, run: Run, skip: Skip, files: ManifestEntry[]): Promise<void> {
  // IPVS registers /proc/net/ip_vs in every namespace once the module is loaded.
  if (!existsSync('/proc/net/ip_vs')) {
    skip('ipvsadm-save -n', 'IPVS is not loaded in this kernel (/proc/net/ip_vs absent): kube-proxy cannot be in IPVS mode');
    return;
  }
  if (onPath('ipvsadm-save') && onPath('ipvsadm')) {
    await run(BUNDLE_FILES.ipvsadmSave, ['ipvsadm-save', '-n']);
    await run(BUNDLE_FILES.ipvsadmStats, ['ipvsadm', '-Ln', '--stats', '--exact']);
    return;
  }
  const t0 = performance.now();
  const res = await readIpvs(opts.netns ? { netns: opts.netns } : {});
  const entry: ManifestEntry = { command: 'clbprobe IPVS reader (generic netlink), ipvsadm not installed', durationMs: ms(t0) };
  if (res.snapshot) {
    const path = join(opts.out, BUNDLE_FILES.ipvsJson);
    writeFileSync(path, `${JSON.stringify(res.snapshot, null, 2)}\n`);
    Object.assign(entry, { file: BUNDLE_FILES.ipvsJson, size: statSync(path).size });
  } else entry.error = res.status.reason ?? 'IPVS table not readable';
  files.push(entry);
}

/** Both xtables backends when their save commands exist (the reader picks kube-proxy's); else plain iptables-save. */
async function collectIptables(run: Run, skip: Skip): Promise<void> {
  let any = false;
  for (const backend of ['legacy', 'nft'] as const) {
    for (const fam of [4, 6] as const) {
      const cmd = `ip${fam === 6 ? '6' : ''}tables-${backend}-save`;
      if (!onPath(cmd)) {
        skip(cmd, `${cmd} not found in PATH`);
        continue;
      }
      any = true;
      await run(backendSaveFile(backend, fam), [cmd]);
    }
  }
  if (any) return;
  await run(BUNDLE_FILES.iptablesSave, ['iptables-save']);
  await run(BUNDLE_FILES.ip6tablesSave, ['ip6tables-save']);
}

/** Our ctnetlink reader, in `conntrack -L -o extended,id` text; the conntrack tool if the reader fails. */
async function collectConntrack(opts: CollectOptions, timeoutMs: number, inNs: (a: string[]) => string[]): Promise<ManifestEntry> {
  const path = join(opts.out, BUNDLE_FILES.conntrack);
  const t0 = performance.now();
  const out = createWriteStream(path);
  // Opened before the dump, so the removal below cannot race the stream's own open.
  await once(out, 'ready');
  try {
    await dumpConntrack(
      async (batch) => {
        const text = batch.map((e) => formatConntrack(e, { extended: true, id: true })).join('\n');
        if (!out.write(`${text}\n`)) await once(out, 'drain');
      },
      opts.netns ? { netns: opts.netns } : {},
    );
    out.end();
    await once(out, 'finish');
    return {
      file: BUNDLE_FILES.conntrack,
      command: 'clbprobe conntrack reader (ctnetlink dump), printed as conntrack -L -o extended,id',
      exitStatus: 0,
      durationMs: ms(t0),
      size: statSync(path).size,
    };
  } catch (e) {
    out.destroy();
    // A partial (or empty) file would read as a complete table: only the fallback's output may stay.
    rmSync(path, { force: true });
    const why = e instanceof Error ? e.message : String(e);
    const entry = await runToFile(path, BUNDLE_FILES.conntrack, inNs(['conntrack', '-L', '-o', 'extended,id']), timeoutMs);
    return { ...entry, error: `clbprobe conntrack reader failed (${why}); ${entry.error ?? 'conntrack -L used instead'}` };
  }
}

function copyCluster(from: string, out: string): ManifestEntry {
  const t0 = performance.now();
  const command = `copy of --cluster-file ${from}`;
  try {
    copyFileSync(from, join(out, BUNDLE_FILES.cluster));
  } catch (e) {
    return { command, durationMs: ms(t0), error: `cannot copy: ${e instanceof Error ? e.message : String(e)}` };
  }
  const entry: ManifestEntry = { file: BUNDLE_FILES.cluster, command, durationMs: ms(t0), size: statSync(join(out, BUNDLE_FILES.cluster)).size };
  try {
    const { warnings } = readClusterFile(join(out, BUNDLE_FILES.cluster));
    if (warnings.length > 0) entry.error = warnings.join('; ');
  } catch (e) {
    entry.error = e instanceof Error ? e.message : String(e);
  }
  return entry;
}

/** cluster.json from the API; collections that fail are recorded, the others kept. */
async function listCluster(out: string, kubeconfig: string | undefined): Promise<ManifestEntry> {
  const t0 = performance.now();
  const command = `list Services, EndpointSlices, Ingresses, Nodes from the API (${kubeconfig ? `kubeconfig ${kubeconfig}` : 'in-cluster'})`;
  try {
    const { KubeApi } = await import('../cluster/kube-api.js');
    const { loadApiTarget } = await import('../cluster/kube-config.js');
    const { list, errors } = await listClusterObjects(new KubeApi(loadApiTarget(kubeconfig)));
    const path = join(out, BUNDLE_FILES.cluster);
    writeFileSync(path, `${JSON.stringify(list, null, 1)}\n`);
    return { file: BUNDLE_FILES.cluster, command, durationMs: ms(t0), size: statSync(path).size, ...(errors.length ? { error: errors.join('; ') } : {}) };
  } catch (e) {
    return { command, durationMs: ms(t0), error: e instanceof Error ? e.message : String(e) };
  }
}

/** Runs argv, writes its stdout (through filter) to path, and records how it went. */
function runToFile(
  path: string,
  file: string,
  argv: string[],
  timeoutMs: number,
  filter?: (out: string) => string,
): Promise<ManifestEntry> {
  const t0 = performance.now();
  const command = argv.join(' ');
  return new Promise((resolve) => {
    execFile(
      argv[0]!,
      argv.slice(1),
      { timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 1024 * 1024 * 1024, env: { ...process.env, LC_ALL: 'C' } },
      (err, stdout, stderr) => {
        const entry: ManifestEntry = { command, exitStatus: 0, durationMs: ms(t0) };
        if (err) {
          entry.exitStatus = typeof err.code === 'number' ? err.code : null;
          entry.error =
            err.code === 'ENOENT'
              ? `${argv[0]} not found in PATH`
              : err.killed
                ? `timed out after ${timeoutMs} ms`
                : String(stderr).trim().split('\n')[0] || `exited with ${err.code ?? err.signal}`;
        }
        // Partial output of a failing command can still help; empty output is not written.
        if (stdout.length > 0 || !err) {
          writeFileSync(path, filter ? filter(stdout) : stdout);
          Object.assign(entry, { file, size: statSync(path).size });
        }
        resolve(entry);
      },
    );
  });
}

function onPath(cmd: string): boolean {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => {
    try {
      accessSync(join(dir, cmd), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

function readFirstLine(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8').split('\n')[0]?.trim() || undefined;
  } catch {
    return undefined;
  }
}

function ms(t0: number): number {
  return Math.round((performance.now() - t0) * 10) / 10;
}
