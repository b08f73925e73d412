// A container of deploy/daemonset.yaml (test/support/daemonset.ts) as podman
// arguments, translated the way the kubelet asks a runtime for them: command
// (else the image's ENTRYPOINT) and args, env with the Downward API fields the
// caller supplies, capabilities, no new privileges, the user, a read-only root
// with only the manifest's volumes writable (podman's own tmpfs on /tmp, /run
// and /var/tmp turned off: a pod has none), hostPath volumes as bind mounts of
// the caller's directories, emptyDir as a tmpfs of its size limit, the memory
// limit, the seccomp profile (RuntimeDefault: the engine's default; Localhost:
// the file under the kubelet's seccomp directory), and hostNetwork as a network
// namespace the caller built.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { type AgentContainer, bytesOf, containerEnv } from './daemonset.js';

export interface PodmanPlacement {
  /** Container name (podman's, for logs/exec/rm). */
  name: string;
  /** hostNetwork: the network namespace that stands for the node. */
  netnsPath?: string;
  /** Each hostPath of the manifest -> the directory of the test's that stands for it. */
  hostDirs: Record<string, string>;
  /** Downward API fields (spec.nodeName, ...). */
  fields?: Record<string, string>;
  /** What the kubelet adds: KUBERNETES_SERVICE_HOST/PORT, ... */
  extraEnv?: Record<string, string>;
  /** What the kubelet mounts besides the manifest's volumes (the service account): host dir -> container path, read-only. */
  extraMounts?: Record<string, string>;
  /** The host directory where the kubelet keeps Localhost profiles (its /var/lib/kubelet/seccomp). */
  kubeletSeccompDir?: string;
}

export function podmanRunArgs(c: AgentContainer, p: PodmanPlacement, image = c.image): string[] {
  const a = ['run', '--detach', '--pull=never', '--name', p.name];
  if (c.hostNetwork) {
    if (!p.netnsPath) throw new Error(`${p.name}: hostNetwork needs a network namespace`);
    a.push(`--network=ns:${p.netnsPath}`);
  }
  if (c.capabilities.drop.length > 0) a.push(`--cap-drop=${c.capabilities.drop.join(',')}`);
  if (c.capabilities.add.length > 0) a.push(`--cap-add=${c.capabilities.add.join(',')}`);
  if (c.privileged) a.push('--privileged');
  if (!c.allowPrivilegeEscalation) a.push('--security-opt=no-new-privileges');
  a.push(`--user=${c.runAsUser}:0`);
  if (c.readOnlyRootFilesystem) a.push('--read-only', '--read-only-tmpfs=false');
  const seccomp = c.seccompProfile;
  if (seccomp.type === 'Unconfined') a.push('--security-opt=seccomp=unconfined');
  else if (seccomp.type === 'Localhost') {
    if (!p.kubeletSeccompDir || !seccomp.localhostProfile)
      throw new Error(`${p.name}: a Localhost seccomp profile needs the kubelet's seccomp directory`);
    a.push(`--security-opt=seccomp=${join(p.kubeletSeccompDir, seccomp.localhostProfile)}`);
  } else if (seccomp.type !== 'RuntimeDefault')
    throw new Error(`${p.name}: seccompProfile type ${seccomp.type} is not supported here`);
  for (const m of c.mounts) {
    if (m.hostPath !== undefined) {
      const dir = p.hostDirs[m.hostPath];
      if (!dir) throw new Error(`${p.name}: no directory stands for the hostPath ${m.hostPath}`);
      a.push('--volume', `${dir}:${m.mountPath}`);
    } else if (m.emptyDir) a.push('--mount', `type=tmpfs,destination=${m.mountPath},tmpfs-size=256m`);
  }
  for (const [host, path] of Object.entries(p.extraMounts ?? {})) a.push('--volume', `${host}:${path}:ro`);
  if (c.resources.limits.memory) a.push(`--memory=${bytesOf(c.resources.limits.memory)}`);
  const env = { ...containerEnv(c, p.fields ?? {}), ...p.extraEnv };
  for (const [k, v] of Object.entries(env)) a.push('--env', `${k}=${v}`);
  // Kubernetes: command replaces the ENTRYPOINT (and drops CMD), args follow.
  if (c.command.length > 0) a.push(`--entrypoint=${JSON.stringify(c.command)}`);
  a.push(image, ...c.args);
  return a;
}

/** Runs podman; throws with its stderr when it fails. */
export function podman(args: string[], opts: { timeoutMs?: number; input?: string } = {}): string {
  const r = spawnSync('podman', args, {
    encoding: 'utf8',
    timeout: opts.timeoutMs ?? 120_000,
    maxBuffer: 64 * 1024 * 1024,
    input: opts.input,
  });
  if (r.error) throw r.error;
  if (r.status !== 0)
    throw new Error(`podman ${args.slice(0, 3).join(' ')} ... exited ${r.status ?? r.signal}: ${r.stderr.trim()}`);
  return r.stdout;
}

/** podman, for a container that may be gone already: never throws. */
export function podmanQuiet(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync('podman', args, { encoding: 'utf8', timeout: 60_000, maxBuffer: 64 * 1024 * 1024 });
  return { status: r.status, stdout: r.stdout ?? '', stderr: r.stderr ?? '' };
}
