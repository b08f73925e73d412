// The agent container of deploy/daemonset.yaml, read from the file we ship, so
// that tests and benches start the agent exactly as the DaemonSet does: its
// command, args, env, security context, volumes and hostNetwork. Never copy
// these values into a test: a change to the manifest must reach every test.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { imageNode } from './image-node.js';

export const REPO_ROOT = join(import.meta.dirname, '../..');
export const DAEMONSET_PATH = join(REPO_ROOT, 'deploy/daemonset.yaml');
export const EVIDENCE_RELAY_PATH = join(REPO_ROOT, 'deploy/evidence-relay.yaml');
/** Where the image puts the project (Dockerfile: WORKDIR /app). */
export const IMAGE_APP_DIR = '/app';

export interface EnvVar {
  name: string;
  /** A literal value; undefined for valueFrom (the Downward API). */
  value?: string;
  /** The Downward API field for valueFrom.fieldRef, e.g. spec.nodeName. */
  fieldPath?: string;
}

export interface AgentContainer {
  image: string;
  command: string[];
  args: string[];
  env: EnvVar[];
  capabilities: { drop: string[]; add: string[] };
  readOnlyRootFilesystem: boolean;
  allowPrivilegeEscalation: boolean;
  privileged: boolean;
  runAsUser: number;
  seccompProfile: { type: string; localhostProfile?: string };
  hostNetwork: boolean;
  /** mountPath -> the volume behind it (hostPath path, or emptyDir). */
  mounts: { mountPath: string; hostPath?: string; emptyDir: boolean }[];
  resources: { limits: Record<string, string>; requests: Record<string, string> };
  /** Failed liveness probes in a row before the kubelet restarts the container (Kubernetes' default 3). */
  livenessFailureThreshold: number;
}

type Obj = Record<string, unknown>;
/** A manifest that is not shaped as expected; podContainer names the file. */
class ShapeError extends Error {}
const obj = (v: unknown, what: string): Obj => {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new ShapeError(`${what} is not an object`);
  return v as Obj;
};
const list = (v: unknown, what: string): unknown[] => {
  if (v === undefined) return [];
  if (!Array.isArray(v)) throw new ShapeError(`${what} is not a list`);
  return v;
};
const strings = (v: unknown, what: string): string[] =>
  list(v, what).map((x, i) => {
    if (typeof x !== 'string') throw new ShapeError(`${what}[${i}] is not a string`);
    return x;
  });

/** The DaemonSet's one container, "agent", as shipped. */
export function agentContainer(path = DAEMONSET_PATH): AgentContainer {
  return podContainer('agent', path);
}

/**
 * A container or init container of a workload's pod, by name, as shipped: the DaemonSet's by
 * default, or the `kind` document of a multi-document manifest (deploy/evidence-relay.yaml's
 * Deployment).
 */
export function podContainer(name: string, path = DAEMONSET_PATH, kind = 'DaemonSet'): AgentContainer {
  try {
    return readPodContainer(name, path, kind);
  } catch (e) {
    throw e instanceof ShapeError ? new Error(`${path}: ${e.message}`) : e;
  }
}

function readPodContainer(name: string, path: string, kind: string): AgentContainer {
  const docs = parseAllDocuments(readFileSync(path, 'utf8')).map((d) => d.toJS() as unknown);
  const ds = obj(
    docs.find((d) => (d as Obj | null)?.kind === kind),
    `the ${kind}`,
  );
  const pod = obj(obj(obj(ds.spec, 'spec').template, 'spec.template').spec, 'spec.template.spec');
  const containers = [...list(pod.initContainers, 'initContainers'), ...list(pod.containers, 'containers')].map(
    (c, i) => obj(c, `containers[${i}]`),
  );
  const c = containers.find((x) => x.name === name);
  if (!c) throw new Error(`${path}: no container named ${name}`);
  const sc = obj(c.securityContext ?? {}, 'securityContext');
  const caps = obj(sc.capabilities ?? {}, 'capabilities');
  const volumes = new Map(
    list(pod.volumes, 'volumes').map((v, i) => {
      const vol = obj(v, `volumes[${i}]`);
      return [String(vol.name), vol] as const;
    }),
  );
  const resources = obj(c.resources ?? {}, 'resources');
  return {
    image: String(c.image),
    command: strings(c.command, 'command'),
    args: strings(c.args, 'args'),
    env: list(c.env, 'env').map((e, i) => {
      const v = obj(e, `env[${i}]`);
      const fieldRef = v.valueFrom ? obj(obj(v.valueFrom, 'valueFrom').fieldRef ?? {}, 'fieldRef') : undefined;
      return {
        name: String(v.name),
        value: v.value === undefined ? undefined : String(v.value),
        fieldPath: fieldRef?.fieldPath as string | undefined,
      };
    }),
    capabilities: { drop: strings(caps.drop, 'capabilities.drop'), add: strings(caps.add, 'capabilities.add') },
    readOnlyRootFilesystem: sc.readOnlyRootFilesystem === true,
    allowPrivilegeEscalation: sc.allowPrivilegeEscalation !== false,
    privileged: sc.privileged === true,
    runAsUser: Number(sc.runAsUser ?? 0),
    seccompProfile: obj(
      sc.seccompProfile ?? { type: 'Unconfined' },
      'seccompProfile',
    ) as AgentContainer['seccompProfile'],
    hostNetwork: pod.hostNetwork === true,
    mounts: list(c.volumeMounts, 'volumeMounts').map((m, i) => {
      const mount = obj(m, `volumeMounts[${i}]`);
      const vol = volumes.get(String(mount.name));
      if (!vol) throw new Error(`${path}: volumeMount ${String(mount.name)} names no volume`);
      return {
        mountPath: String(mount.mountPath),
        hostPath: vol.hostPath ? String(obj(vol.hostPath, 'hostPath').path) : undefined,
        emptyDir: vol.emptyDir !== undefined,
      };
    }),
    resources: {
      limits: (resources.limits ?? {}) as Record<string, string>,
      requests: (resources.requests ?? {}) as Record<string, string>,
    },
    livenessFailureThreshold: Number(obj(c.livenessProbe ?? {}, 'livenessProbe').failureThreshold ?? 3),
  };
}

/** The image's ENTRYPOINT (the Dockerfile's last one, exec form): what runs when the manifest has no command. */
export function imageEntrypoint(dockerfile = join(REPO_ROOT, 'Dockerfile')): string[] {
  const all = [...readFileSync(dockerfile, 'utf8').matchAll(/^ENTRYPOINT\s+(\[.*\])\s*$/gm)];
  if (all.length === 0) throw new Error(`${dockerfile}: no ENTRYPOINT in exec form`);
  return JSON.parse(all[all.length - 1]![1]!) as string[];
}

/**
 * The container's command line (command, else the image's ENTRYPOINT, then args, as Kubernetes
 * builds it) with the image's /app replaced by this checkout, for running the shipped settings on
 * the host (the image test runs them unchanged).
 */
export function hostArgv(c: AgentContainer, appDir = REPO_ROOT): string[] {
  const command = c.command.length > 0 ? c.command : imageEntrypoint();
  return inCheckout([...command, ...c.args], appDir);
}

/** A command line of the image with its /app paths as this checkout's (appDir). */
export function inCheckout(argv: readonly string[], appDir = REPO_ROOT): string[] {
  return argv.map((a) => (a.startsWith(`${IMAGE_APP_DIR}/`) ? appDir + a.slice(IMAGE_APP_DIR.length) : a));
}

/** The container's literal env plus the Downward API fields the caller supplies. */
export function containerEnv(c: AgentContainer, fields: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const e of c.env) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.fieldPath !== undefined) {
      const v = fields[e.fieldPath];
      if (v === undefined) throw new Error(`env ${e.name} needs the Downward API field ${e.fieldPath}`);
      env[e.name] = v;
    }
  }
  return env;
}

/** Memory limit in bytes ("256Mi" -> 268435456). */
export function bytesOf(quantity: string): number {
  const m = /^(\d+)(Ki|Mi|Gi)?$/.exec(quantity);
  if (!m) throw new Error(`unsupported quantity ${quantity}`);
  return Number(m[1]) * ({ Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3 }[m[2] ?? ''] ?? 1);
}

/** Where the checkout appears inside the agent's mount namespace. */
const APP = '/run/clbprobe-app';

/**
 * The argv that runs container `c` as the manifest says, on the host: a private mount namespace
 * with the checkout at APP (as the image's /app), each hostPath bound from `scratch`/hostN, a tmpfs
 * per emptyDir, a read-only root, then setpriv with the manifest's user, no new privileges and only
 * its capabilities, exec-ing the container's command line (its `node` the image's release,
 * test/support/image-node.ts). Run it in the namespace standing in for hostNetwork
 * (`ip netns exec NS ...`).
 */
export function containerScript(c: AgentContainer, scratch: string): string[] {
  const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
  // /run lives on the root file system here: give hostPaths under it a tmpfs to be created in.
  // The checkout is bound into it as the image's /app stands in the image: the emptyDir on /tmp
  // below would hide a checkout that lives under /tmp (a CI clone).
  const lines = ['mount -t tmpfs tmpfs /run', `mkdir ${APP} && mount --bind ${q(REPO_ROOT)} ${APP}`];
  // A hostPath is a directory of this test's (bound first: it lives under /tmp, an emptyDir below).
  c.mounts.forEach((m, i) => {
    if (m.hostPath === undefined) return;
    lines.push(
      `mkdir -p ${q(join(scratch, `host${i}`))} ${q(m.mountPath)} && mount --bind ${q(join(scratch, `host${i}`))} ${q(m.mountPath)}`,
    );
  });
  // A writable tmpfs stands in for each emptyDir.
  for (const m of c.mounts) if (m.emptyDir) lines.push(`mount -t tmpfs -o size=64m tmpfs ${q(m.mountPath)}`);
  if (c.readOnlyRootFilesystem) lines.push('mount -o remount,bind,ro /');
  const keep = c.capabilities.add.map((x) => `+${x.toLowerCase()}`).join(',');
  const drop = c.capabilities.drop.includes('ALL') ? '-all' : '';
  const setpriv = [
    'setpriv',
    ...(c.allowPrivilegeEscalation ? [] : ['--no-new-privs']),
    '--reuid',
    String(c.runAsUser),
    '--regid',
    '0',
    '--clear-groups',
    '--bounding-set',
    [drop, keep].filter(Boolean).join(','),
    '--inh-caps',
    '-all',
    '--',
  ];
  // The image's Node release runs the command's `node`, not the host's: V8's flags, memory and
  // tiering differ between releases (a bare node 24 maps 2 MB more, and the manifest's --max-opt
  // stops at Maglev, which node 20 does not run by default).
  const argv = hostArgv(c, APP);
  if (argv[0] === 'node') argv[0] = imageNode();
  lines.push(`exec ${[...setpriv, ...argv].map(q).join(' ')}`);
  return ['unshare', '--mount', '--propagation', 'private', '--', 'sh', '-euc', lines.join('\n')];
}

/**
 * A `node` command line split into node's own flags and the script it runs (the first argument
 * ending in .js) with the script's arguments: benches run the shipped flags with the shipped
 * script, or another build of it (--cli).
 */
export function nodeCommand(argv: readonly string[]): { nodeFlags: string[]; script: string; scriptArgs: string[] } {
  const at = argv.findIndex((a, i) => i > 0 && a.endsWith('.js'));
  if (argv[0] !== 'node' || at < 0) throw new Error(`not a node command with a script: ${argv.join(' ')}`);
  return { nodeFlags: argv.slice(1, at), script: argv[at]!, scriptArgs: argv.slice(at + 1) };
}
