// The product image, built by podman from the Dockerfile as shipped (--pull=never: the base images
// named by its FROM lines are the ones scripts/setup-image.sh assembled; --network=host for apt and
// npm, so podman sets up no CNI network). The image test and the kubelet test both build it this way.

import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from './daemonset.js';

/**
 * Where this machine's npm trusts an extra CA (`npm config get cafile`: a TLS-intercepting egress
 * proxy), the build's RUN steps get it the way a user behind such a proxy passes it: bind-mounted,
 * with npm's global config ($PREFIX/etc/npmrc) pointing at it. The Dockerfile stays as users build it.
 */
function buildCaMounts(dir: string): string[] {
  const cafile = spawnSync('npm', ['config', 'get', 'cafile'], { encoding: 'utf8' }).stdout.trim();
  if (!cafile || cafile === 'null' || cafile === 'undefined' || !existsSync(cafile)) return [];
  writeFileSync(join(dir, 'build-npmrc'), 'cafile=/etc/clbprobe-build-ca.crt\n');
  return [
    '--volume',
    `${cafile}:/etc/clbprobe-build-ca.crt:ro`,
    '--volume',
    `${join(dir, 'build-npmrc')}:/usr/local/etc/npmrc:ro`,
  ];
}

/** Builds `image` from the Dockerfile (layers cached by podman); `scratch` is a directory of the caller's. */
export function buildProductImage(image: string, scratch: string): void {
  const b = spawnSync(
    'podman',
    [
      'build',
      '--pull=never',
      '--network=host',
      ...buildCaMounts(scratch),
      '-t',
      image,
      '-f',
      join(REPO_ROOT, 'Dockerfile'),
      REPO_ROOT,
    ],
    {
      encoding: 'utf8',
      timeout: 40 * 60_000,
      maxBuffer: 256 * 1024 * 1024,
    },
  );
  if (b.status !== 0)
    throw new Error(`podman build failed (${b.status ?? b.signal}):\n${(b.stdout + b.stderr).slice(-6000)}`);
}
