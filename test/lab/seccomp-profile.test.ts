// The shipped seccomp profile (deploy/seccomp/clbprobe.json) refuses what the
// agent does not need and keeps what it does, measured in a container with the
// DaemonSet's capabilities and user: a static helper
// (test/support/seccomp-probe.c) makes each call under the profile and
// unconfined, so a refusal is an answer the kernel itself would not give.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentContainer, REPO_ROOT } from '../support/daemonset.js';
import { isRoot } from '../support/netns.js';
import { podman } from '../support/podman.js';

/** The Dockerfile's runtime base (node:NODE_VERSION-DEBIAN-slim), which the agent runs on. */
const IMAGE = 'docker.io/library/node:24-bookworm-slim';
const PROFILE = join(REPO_ROOT, 'deploy/seccomp/clbprobe.json');
const ENOSYS = 38;
const EPERM = 1;

const REFUSED = [
  'unshare',
  'unshare-net',
  'clone-newuser',
  'clone3',
  'keyctl',
  'add_key',
  'request_key',
  'setns',
  'mount',
  'umount2',
  'fsopen',
  'fsconfig',
  'fsmount',
  'fspick',
  'move_mount',
  'open_tree',
  'mount_setattr',
  'pivot_root',
  'reboot',
  'syslog',
  'pidfd_getfd',
  'mbind',
  'set_mempolicy',
  'get_mempolicy',
  'ptrace',
  'process_vm_readv',
  'name_to_handle_at',
];
const NEEDED = ['fork', 'thread', 'bpf', 'perf_event_open'];

const haveImage = isRoot && spawnSync('podman', ['image', 'exists', IMAGE]).status === 0;
const haveGcc = spawnSync('gcc', ['--version']).status === 0;

describe.skipIf(!haveImage || !haveGcc)(
  "the shipped seccomp profile, with the DaemonSet's capabilities and user",
  () => {
    let scratch = '';
    let probe = '';
    beforeAll(() => {
      scratch = mkdtempSync(join(tmpdir(), 'cbh-seccomp-'));
      probe = join(scratch, 'probe');
      const cc = spawnSync(
        'gcc',
        ['-static', '-O1', '-o', probe, join(REPO_ROOT, 'test/support/seccomp-probe.c'), '-lpthread'],
        { encoding: 'utf8' },
      );
      if (cc.status !== 0) throw new Error(`gcc: ${cc.stderr}`);
    });
    afterAll(() => {
      if (scratch) rmSync(scratch, { recursive: true, force: true });
    });

    const run = (seccomp: string): Map<string, number> => {
      const agent = agentContainer();
      const out = podman([
        'run',
        '--rm',
        '--pull=never',
        '--network=none',
        `--cap-drop=${agent.capabilities.drop.join(',')}`,
        `--cap-add=${agent.capabilities.add.join(',')}`,
        '--security-opt=no-new-privileges',
        `--user=${agent.runAsUser}:0`,
        `--security-opt=seccomp=${seccomp}`,
        '--volume',
        `${probe}:/probe:ro`,
        IMAGE,
        '/probe',
        ...REFUSED,
        ...NEEDED,
      ]);
      const errnos = new Map<string, number>();
      for (const line of out.trim().split('\n')) {
        const [name, errno] = line.split(' ');
        errnos.set(name!, Number(errno));
      }
      return errnos;
    };

    it('refuses namespaces, keyrings, mounts, pivot_root, reboot, syslog, pidfd_getfd and NUMA policy; bpf, perf_event_open, fork and threads reach the kernel', () => {
      expect(existsSync(PROFILE)).toBe(true);
      const confined = run(PROFILE);
      const kernel = run('unconfined');
      for (const name of REFUSED) {
        const got = confined.get(name);
        // The filter's errno (the profile's default ENOSYS, or an ERRNO rule's EPERM), never the kernel's own answer.
        expect([ENOSYS, EPERM], name).toContain(got);
        expect(got, `${name}: the kernel answers ${kernel.get(name)} too`).not.toBe(kernel.get(name));
      }
      for (const name of NEEDED) expect(confined.get(name), name).toBe(kernel.get(name));
      expect(confined.get('fork')).toBe(0);
      expect(confined.get('thread')).toBe(0);
      expect(confined.get('bpf')).not.toBe(ENOSYS);
    });
  },
);
