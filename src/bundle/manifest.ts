// A bundle's manifest.json: who collected it, when and where, and per file its command, outcome and failure reason.
// A hand-made bundle has none.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { errText } from '../errors.js';

export const MANIFEST_FILE = 'manifest.json';
export const BUNDLE_FORMAT = 'clbprobe-bundle/1';

export interface ManifestEntry {
  /** File written in the bundle (relative); absent when nothing was written. */
  file?: string;
  /** The command as a shell would show it, or a description for in-process readers. */
  command: string;
  /** Exit status of the command; null when killed by a signal or never started. */
  exitStatus?: number | null;
  durationMs: number;
  /** Bytes written. */
  size?: number;
  /** Why the step failed or was skipped (missing tool, permission, timeout, absent kernel feature). */
  error?: string;
  /** True when the step did not run because it does not apply here (e.g. no IPVS in this kernel). */
  skipped?: boolean;
  /** True when the file holds only part of what the step read (`error` says what is missing). */
  incomplete?: boolean;
}

export interface KubeProxyInfo {
  /** 'iptables', 'ipvs', 'nftables', ... ; absent when it could not be told. */
  mode?: string;
  /** How the mode was found: '--proxy-mode flag', 'config file /var/lib/...: mode', 'default (no mode set)'. */
  source: string;
  pid?: number;
  args?: string[];
}

export interface BundleManifest {
  format: typeof BUNDLE_FORMAT;
  clbprobeVersion: string;
  nodeName: string;
  hostname: string;
  /** `uname -r`. */
  kernel?: string;
  /** Network namespace collected instead of the host's (labs and tests). */
  netns?: string;
  startedAt: string;
  endedAt: string;
  /** kube-proxy's mode when discoverable from its process; else why not. */
  kubeProxy?: KubeProxyInfo;
  files: ManifestEntry[];
}

/** clbprobe's version from its package.json (found upwards from this module: src/ or dist/src/). */
export function clbprobeVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    const p = join(dir, 'package.json');
    if (existsSync(p)) {
      const pkg = JSON.parse(readFileSync(p, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'clbprobe' && pkg.version) return pkg.version;
    }
    dir = dirname(dir);
  }
  return 'unknown';
}

/** Parses manifest.json, throwing with the file name if it is not one; bad entries are dropped into `warnings`. */
export function parseManifest(text: string, file: string, warnings: string[] = []): BundleManifest {
  let m: unknown;
  try {
    m = JSON.parse(text);
  } catch (e) {
    throw new Error(`${file}: not valid JSON: ${errText(e)}`);
  }
  const o = m as Partial<BundleManifest> | null;
  if (typeof o !== 'object' || o === null || o.format !== BUNDLE_FORMAT) {
    throw new Error(`${file}: not a clbprobe bundle manifest (format is not "${BUNDLE_FORMAT}")`);
  }
  if (typeof o.nodeName !== 'string' || typeof o.startedAt !== 'string' || !Array.isArray(o.files)) {
    throw new Error(`${file}: manifest without nodeName, startedAt or files`);
  }
  const out = { ...o } as Record<string, unknown>;
  for (const k of ['clbprobeVersion', 'hostname', 'kernel', 'netns', 'endedAt'] as const) {
    if (out[k] !== undefined && typeof out[k] !== 'string') {
      warnings.push(`${file}: "${k}" is not a string; ignored`);
      delete out[k];
    }
  }
  if (out.kubeProxy !== undefined && !isKubeProxyInfo(out.kubeProxy)) {
    warnings.push(`${file}: "kubeProxy" has no "source" text; ignored`);
    delete out.kubeProxy;
  }
  out.files = o.files.filter((f: unknown, i) => {
    const why = entryProblem(f);
    if (why) warnings.push(`${file}: files[${i}] ${why}; entry ignored`);
    return !why;
  });
  return out as unknown as BundleManifest;
}

export function isKubeProxyInfo(value: unknown): value is KubeProxyInfo {
  const o = value as Partial<KubeProxyInfo> | null;
  return (
    typeof o === 'object' &&
    o !== null &&
    typeof o.source === 'string' &&
    (o.mode === undefined || typeof o.mode === 'string')
  );
}

/** Why a files[] entry is not a ManifestEntry, or undefined when it is one. */
function entryProblem(file: unknown): string | undefined {
  if (typeof file !== 'object' || file === null || Array.isArray(file)) return 'is not an object';
  const e = file as Record<string, unknown>;
  if (typeof e.command !== 'string') return 'has no "command" text';
  if (e.file !== undefined && typeof e.file !== 'string') return '"file" is not text';
  if (e.error !== undefined && typeof e.error !== 'string') return '"error" is not text';
  if (e.incomplete !== undefined && typeof e.incomplete !== 'boolean') return '"incomplete" is not true or false';
  if (e.exitStatus !== undefined && e.exitStatus !== null && !Number.isInteger(e.exitStatus))
    return '"exitStatus" is not an integer';
  return undefined;
}
