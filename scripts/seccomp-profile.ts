// Makes deploy/seccomp/clbprobe.json (docs/seccomp.md): a container runtime's
// default seccomp profile (containers-common's, the one podman and CRI-O use)
// resolved for exactly the DaemonSet's capabilities and the x86_64/arm64
// families, minus the calls the agent does not need (NOT_NEEDED: namespaces,
// keyrings, mounts, reboot, the kernel log, other processes' memory and fds,
// NUMA policy), with clone() allowed only without namespace flags and clone3()
// answered ENOSYS, plus bpf() and perf_event_open(), which that default allows
// only with CAP_SYS_ADMIN although the kernel gates them on CAP_BPF/CAP_PERFMON.
// The result has no includes/excludes: containerd reads a Localhost profile
// as a plain OCI seccomp section and would apply conditional rules
// unconditionally; a flat profile means the same on every runtime.
//   npx tsx scripts/seccomp-profile.ts [/usr/share/containers/seccomp.json] > deploy/seccomp/clbprobe.json
// The image test regenerates it from the installed default and fails when the
// shipped file differs.
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

interface Rule {
  names: string[];
  action: string;
  errnoRet?: number;
  args?: unknown[] | null;
  includes?: { caps?: string[]; arches?: string[]; minKernel?: string };
  excludes?: { caps?: string[]; arches?: string[] };
}

interface EngineProfile {
  defaultAction: string;
  defaultErrnoRet?: number;
  archMap?: { architecture: string; subArchitectures?: string[] }[];
  syscalls: Rule[];
}

/** The families a node runs (Go's arch names, as the profile's includes use them) and their seccomp arches. */
const ARCHES = ['amd64', 'x86', 'x32', 'arm64', 'arm'];
const SCMP_ARCHES = ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32', 'SCMP_ARCH_AARCH64', 'SCMP_ARCH_ARM'];
/** What the kernel asks for these calls (bpf: CAP_BPF; perf_event_open: CAP_PERFMON). */
export const ADDED_CALLS = ['bpf', 'perf_event_open'];

/**
 * Calls containers-common allows unconditionally (for rootless nested containers) that the agent
 * never makes; Docker's default allows each only with a capability the agent does not hold.
 * Removed, they fall to the profile's default action (ENOSYS) or to an ERRNO rule naming them.
 */
export const NOT_NEEDED: ReadonlyMap<string, string> = new Map([
  ['unshare', 'new namespaces (a user namespace grants every capability inside it)'],
  ['setns', 'joining namespaces (--netns is for labs, which run unconfined)'],
  ['keyctl', "the kernel keyrings, shared with the host's other containers"],
  ['add_key', 'the kernel keyrings'],
  ['request_key', 'the kernel keyrings'],
  ['mount', 'mounting'],
  ['umount', 'mounting'],
  ['umount2', 'mounting'],
  ['fsopen', 'the new mount API'],
  ['fsconfig', 'the new mount API'],
  ['fsmount', 'the new mount API'],
  ['fspick', 'the new mount API'],
  ['move_mount', 'the new mount API'],
  ['open_tree', 'the new mount API'],
  ['mount_setattr', 'the new mount API'],
  ['pivot_root', 'changing the root'],
  ['reboot', 'rebooting'],
  ['syslog', "the kernel log (addresses, other tenants' messages)"],
  ['ptrace', "other processes' memory"],
  ['process_vm_readv', "other processes' memory"],
  ['process_vm_writev', "other processes' memory"],
  ['pidfd_getfd', "other processes' file descriptors"],
  ['name_to_handle_at', 'file handles (open_by_handle_at is refused already)'],
  ['mbind', 'NUMA memory policy'],
  ['set_mempolicy', 'NUMA memory policy'],
  ['get_mempolicy', 'NUMA memory policy'],
]);

/** clone() flags that create namespaces (CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS..CLONE_NEWNET), Docker's mask; CLONE_NEWTIME exists only for unshare() and clone3(). */
export const CLONE_NAMESPACE_FLAGS = 0x7e020000;
/** clone3() passes its flags in memory seccomp cannot read, so it is refused with ENOSYS, on which glibc and musl fall back to clone(). */
const ENOSYS = 38;

export function agentProfile(engineDefault: EngineProfile, capabilities: string[]): object {
  const caps = new Set(capabilities.map((c) => (c.startsWith('CAP_') ? c : `CAP_${c}`)));
  const applies = (r: Rule): boolean => {
    if (r.includes?.caps && !r.includes.caps.every((c) => caps.has(c))) return false;
    if (r.includes?.arches && !r.includes.arches.some((a) => ARCHES.includes(a))) return false;
    if (r.excludes?.caps?.some((c) => caps.has(c))) return false;
    if (r.excludes?.arches && ARCHES.every((a) => r.excludes!.arches!.includes(a))) return false;
    return true;
  };
  const rewritten = new Set([...ADDED_CALLS, 'clone', 'clone3']);
  const syscalls: object[] = engineDefault.syscalls.filter(applies).flatMap((r) => {
    const allows = r.action === 'SCMP_ACT_ALLOW';
    const names = r.names.filter((n) => !rewritten.has(n) && !(allows && NOT_NEEDED.has(n)));
    if (names.length === 0) return [];
    return [
      {
        names,
        action: r.action,
        ...(r.errnoRet !== undefined ? { errnoRet: r.errnoRet } : {}),
        ...(r.args?.length ? { args: r.args } : {}),
      },
    ];
  });
  syscalls.push(
    {
      names: ['clone'],
      action: 'SCMP_ACT_ALLOW',
      args: [{ index: 0, value: CLONE_NAMESPACE_FLAGS, valueTwo: 0, op: 'SCMP_CMP_MASKED_EQ' }],
    },
    { names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
    { names: ADDED_CALLS, action: 'SCMP_ACT_ALLOW' },
  );
  return {
    defaultAction: engineDefault.defaultAction,
    ...(engineDefault.defaultErrnoRet !== undefined ? { defaultErrnoRet: engineDefault.defaultErrnoRet } : {}),
    architectures: SCMP_ARCHES,
    syscalls,
  };
}

export function renderProfile(profile: object): string {
  return `${JSON.stringify(profile, null, 2)}\n`;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { agentContainer } = await import('../test/support/daemonset.js');
  const src = process.argv[2] ?? '/usr/share/containers/seccomp.json';
  process.stdout.write(
    renderProfile(
      agentProfile(JSON.parse(readFileSync(src, 'utf8')) as EngineProfile, agentContainer().capabilities.add),
    ),
  );
}
