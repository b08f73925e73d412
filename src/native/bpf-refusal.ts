// Why the kernel refused a bpf() call, told from the process's own state
// (/proc/self/status): a missing capability, a seccomp filter that blocks the
// call although the capability is there (the tell: EPERM with CAP_BPF
// effective), or a kernel without BPF. Container runtimes' default seccomp
// profiles differ: podman's and CRI-O's (containers-common) allow bpf() only
// with CAP_SYS_ADMIN, so with exactly the DaemonSet's capabilities eBPF fails
// there, and an SRE must learn that from one log line and source_up's reason.
import { readFileSync } from 'node:fs';
import { isPermissionErrno } from '../model/permission.js';

const CAP_SYS_ADMIN = 21n;
const CAP_BPF = 39n;

/** The part of /proc/self/status that decides a bpf() refusal. */
export interface BpfPrivileges {
  capEff: bigint;
  /** 0 none, 1 strict, 2 filter (a container runtime's profile). */
  seccomp: number;
}

export const SECCOMP_FIX =
  'run the agent with the seccomp profile we ship (deploy/seccomp/clbprobe.json: seccompProfile type Localhost, ' +
  'localhostProfile clbprobe.json; deploy/README.md "Seccomp")';

/** Parses /proc/PID/status text; undefined when the fields are missing (not Linux, or unreadable). */
export function parseBpfPrivileges(status: string): BpfPrivileges | undefined {
  const cap = /^CapEff:\s*([0-9a-f]+)\s*$/m.exec(status);
  const sec = /^Seccomp:\s*(\d)\s*$/m.exec(status);
  if (!cap) return undefined;
  return { capEff: BigInt(`0x${cap[1]}`), seccomp: sec ? Number(sec[1]) : 0 };
}

/** This process's own; undefined when /proc is unreadable. */
export function ownBpfPrivileges(): BpfPrivileges | undefined {
  try {
    return parseBpfPrivileges(readFileSync('/proc/self/status', 'utf8'));
  } catch {
    return undefined;
  }
}

const has = (p: BpfPrivileges, bit: bigint): boolean => ((p.capEff >> bit) & 1n) === 1n;

/**
 * One clause naming the cause of a refused bpf() call (errno name `code`), or undefined when the
 * errno says nothing about privileges or BPF support.
 */
export function explainBpfRefusal(code: string, privileges: BpfPrivileges | undefined): string | undefined {
  if (code === 'ENOSYS') {
    return privileges?.seccomp === 2
      ? 'kernel without BPF, or a seccomp profile that does not list bpf(): bpf() is not implemented here (ENOSYS)'
      : 'kernel without BPF: bpf() is not implemented (a kernel built without CONFIG_BPF_SYSCALL); use --capture pcap';
  }
  if (!isPermissionErrno(code)) return undefined;
  if (!privileges) return undefined;
  const capable = has(privileges, CAP_BPF) || has(privileges, CAP_SYS_ADMIN);
  if (!capable) return 'missing capability: CAP_BPF is not in the effective set; grant CAP_BPF (and CAP_NET_ADMIN, CAP_PERFMON) or run as root';
  if (privileges.seccomp === 2) {
    return `blocked by seccomp: bpf() returned ${code} although CAP_BPF is effective; the container's seccomp profile refuses it (the default profile of podman, CRI-O and some containerd releases allows bpf() only with CAP_SYS_ADMIN); ${SECCOMP_FIX}`;
  }
  return `bpf() returned ${code} although CAP_BPF is effective and no seccomp filter is on: a security module (SELinux, AppArmor, lockdown) refuses it`;
}
