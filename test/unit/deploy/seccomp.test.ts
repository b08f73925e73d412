// deploy/seccomp/clbprobe.json against its derivation (scripts/seccomp-profile.ts,
// docs/seccomp.md): nothing the agent does not need is allowed, whatever rule
// order a runtime applies; everything allowed is allowed by the engine default too.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  ADDED_CALLS,
  agentProfile,
  CLONE_NAMESPACE_FLAGS,
  NOT_NEEDED,
  renderProfile,
} from '../../../scripts/seccomp-profile.js';
import { agentContainer, REPO_ROOT } from '../../support/daemonset.js';

interface Rule {
  names: string[];
  action: string;
  args?: { index: number; value: number; op: string }[];
}
interface Profile {
  defaultAction: string;
  defaultErrnoRet?: number;
  syscalls: Rule[];
}

const ENGINE_DEFAULT = '/usr/share/containers/seccomp.json';
const shippedText = readFileSync(join(REPO_ROOT, 'deploy/seccomp/clbprobe.json'), 'utf8');
const shipped = JSON.parse(shippedText) as Profile;
const allowRules = (p: Profile, name: string): Rule[] =>
  p.syscalls.filter((r) => r.action === 'SCMP_ACT_ALLOW' && r.names.includes(name));

describe('the shipped seccomp profile', () => {
  it('allows none of the calls the agent does not need, under any argument', () => {
    const allowed = [...NOT_NEEDED.keys(), 'clone3'].filter((n) => allowRules(shipped, n).length > 0);
    expect(allowed).toEqual([]);
    for (const name of [
      'unshare',
      'setns',
      'keyctl',
      'mount',
      'fsopen',
      'fsmount',
      'move_mount',
      'open_tree',
      'pivot_root',
      'reboot',
      'syslog',
      'pidfd_getfd',
      'mbind',
    ]) {
      expect(NOT_NEEDED.has(name), name).toBe(true);
    }
    expect(shipped.defaultAction).toBe('SCMP_ACT_ERRNO');
  });

  it('allows clone() only when no namespace flag is set, and bpf()/perf_event_open() unconditionally', () => {
    expect(allowRules(shipped, 'clone')).toEqual([
      {
        names: ['clone'],
        action: 'SCMP_ACT_ALLOW',
        args: [{ index: 0, value: CLONE_NAMESPACE_FLAGS, valueTwo: 0, op: 'SCMP_CMP_MASKED_EQ' }],
      },
    ]);
    // CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET.
    const namespaceFlags = [0x20000, 0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000];
    expect(namespaceFlags.reduce((a, f) => a | f, 0)).toBe(CLONE_NAMESPACE_FLAGS);
    for (const name of ADDED_CALLS)
      expect(
        allowRules(shipped, name).some((r) => !r.args),
        name,
      ).toBe(true);
  });

  it.skipIf(!existsSync(ENGINE_DEFAULT))(
    "is what the script derives from this machine's engine default, and allows nothing that default does not allow with the agent's capabilities",
    () => {
      const engineDefault = JSON.parse(readFileSync(ENGINE_DEFAULT, 'utf8'));
      const caps = agentContainer().capabilities.add;
      expect(renderProfile(agentProfile(engineDefault, caps))).toBe(shippedText);
      const engineAllows = new Set(
        engineDefault.syscalls.filter((r: Rule) => r.action === 'SCMP_ACT_ALLOW').flatMap((r: Rule) => r.names),
      );
      const extra = shipped.syscalls
        .filter((r) => r.action === 'SCMP_ACT_ALLOW')
        .flatMap((r) => r.names)
        .filter((n) => !engineAllows.has(n) && !ADDED_CALLS.includes(n));
      expect(extra).toEqual([]);
      expect(shipped.defaultAction).toBe(engineDefault.defaultAction);
    },
  );
});
