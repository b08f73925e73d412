// Makes deploy/seccomp/clbprobe.json: a container runtime's default seccomp
// profile (containers-common's, the one podman and CRI-O use; Docker's and
// containerd's list the same calls) as it applies to the agent's container,
// i.e. resolved for exactly the DaemonSet's capabilities and for the
// x86_64/arm64 families, plus bpf() and perf_event_open(), which that default
// allows only with CAP_SYS_ADMIN although the kernel itself gates them on
// CAP_BPF and CAP_PERFMON.
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

export function agentProfile(engineDefault: EngineProfile, capabilities: string[]): object {
  const caps = new Set(capabilities.map((c) => (c.startsWith('CAP_') ? c : `CAP_${c}`)));
  const applies = (r: Rule): boolean => {
    if (r.includes?.caps && !r.includes.caps.every((c) => caps.has(c))) return false;
    if (r.includes?.arches && !r.includes.arches.some((a) => ARCHES.includes(a))) return false;
    if (r.excludes?.caps?.some((c) => caps.has(c))) return false;
    if (r.excludes?.arches && ARCHES.every((a) => r.excludes!.arches!.includes(a))) return false;
    return true;
  };
  const syscalls = engineDefault.syscalls.filter(applies).flatMap((r) => {
    const names = r.names.filter((n) => !ADDED_CALLS.includes(n));
    if (names.length === 0) return [];
    return [{ names, action: r.action, ...(r.errnoRet !== undefined ? { errnoRet: r.errnoRet } : {}), ...(r.args?.length ? { args: r.args } : {}) }];
  });
  syscalls.push({ names: ADDED_CALLS, action: 'SCMP_ACT_ALLOW' });
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
  process.stdout.write(renderProfile(agentProfile(JSON.parse(readFileSync(src, 'utf8')) as EngineProfile, agentContainer().capabilities.add)));
}
