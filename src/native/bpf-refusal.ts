// Why the kernel refused a bpf() call, told from /proc/self/status: a missing capability, a seccomp
// filter that blocks it although the capability is there (EPERM with CAP_BPF effective: podman's and
// CRI-O's default profiles allow bpf() only with CAP_SYS_ADMIN), or a kernel without BPF.
import { readFileSync } from 'node:fs';
import { release } from 'node:os';
import { isPermissionErrno } from '../model/permission.js';

const CAP_SYS_ADMIN = 21n;
const CAP_BPF = 39n;

/** The part of /proc/self/status that decides a bpf() refusal. */
export interface BpfPrivileges {
  capEff: bigint;
  /** 0 none, 1 strict, 2 filter (a container runtime's profile). */
  seccomp: number;
  /** The kernel's highest capability number (/proc/sys/kernel/cap_last_cap): below 39 it has no CAP_BPF. */
  capLastCap?: number;
  /** The kernel release (uname -r), for the message. */
  kernel?: string;
}

/** The costs of the fallbacks where bpf() is refused, for the operator who decides. */
const NO_BPF_FALLBACK_COST =
  'counters fall back to pcap (each LB-path packet copied to the agent: ' +
  '~0.4 us of CPU per packet against ~0.15 us counted in the kernel) ' +
  'and conntrack events are filtered in user space (every ' +
  'conntrack event of the node is read and decoded by the agent)';

const PRE_5_8_FIX =
  'to keep eBPF on such nodes, deploy the opt-in kustomize component deploy/components/pre-5.8 ' +
  '(CAP_SYS_ADMIN instead of BPF and PERFMON, on nodes labelled for it; read its risk first)';

const SECCOMP_FIX =
  'run the agent with the seccomp profile we ship (deploy/seccomp/clbprobe.json: seccompProfile type Localhost, ' +
  'localhostProfile clbprobe.json; deploy/README.md "Seccomp")';

/** Parses /proc/PID/status text; undefined when the fields are missing (not Linux, or unreadable). */
export function parseBpfPrivileges(status: string): BpfPrivileges | undefined {
  const cap = /^CapEff:\s*([0-9a-f]+)\s*$/m.exec(status);
  const sec = /^Seccomp:\s*(\d)\s*$/m.exec(status);
  if (!cap) return undefined;
  return { capEff: BigInt(`0x${cap[1]}`), seccomp: sec ? Number(sec[1]) : 0 };
}

/** The number in /proc/sys/kernel/cap_last_cap's text; undefined when it is not one. */
export function parseCapLastCap(text: string): number | undefined {
  return /^\d+\s*$/.test(text) ? Number.parseInt(text, 10) : undefined;
}

/** This process's own, with the kernel's last capability; undefined when /proc is unreadable. */
export function ownBpfPrivileges(): BpfPrivileges | undefined {
  let p: BpfPrivileges | undefined;
  try {
    p = parseBpfPrivileges(readFileSync('/proc/self/status', 'utf8'));
  } catch {
    return undefined;
  }
  if (!p) return undefined;
  try {
    const last = parseCapLastCap(readFileSync('/proc/sys/kernel/cap_last_cap', 'utf8'));
    if (last !== undefined) p.capLastCap = last;
  } catch {
    // unknown: the message then cannot tell an old kernel from a missing grant
  }
  p.kernel = release();
  return p;
}

const has = (p: BpfPrivileges, bit: bigint): boolean => ((p.capEff >> bit) & 1n) === 1n;

/** The cause of a refused bpf() (errno name `code`); undefined when the errno says nothing about BPF. */
export function explainBpfRefusal(code: string, privileges: BpfPrivileges | undefined): string | undefined {
  if (code === 'ENOSYS') {
    return privileges?.seccomp === 2
      ? 'kernel without BPF, or a seccomp profile that does not list bpf(): bpf() is not implemented here (ENOSYS)'
      : 'kernel without BPF: bpf() is not implemented (a kernel built without CONFIG_BPF_SYSCALL); use --capture pcap';
  }
  if (!isPermissionErrno(code)) return undefined;
  if (!privileges) return undefined;
  const capable = has(privileges, CAP_BPF) || has(privileges, CAP_SYS_ADMIN);
  if (!capable && privileges.capLastCap !== undefined && privileges.capLastCap < Number(CAP_BPF)) {
    return (
      `this kernel has no CAP_BPF: ${privileges.kernel ?? 'it'} knows capabilities ` +
      `up to ${privileges.capLastCap} (CAP_BPF and CAP_PERFMON came with Linux 5.8), ` +
      `so bpf() needs CAP_SYS_ADMIN, which the DaemonSet does not grant; ${NO_BPF_FALLBACK_COST}; ${PRE_5_8_FIX}`
    );
  }
  if (!capable)
    return (
      'missing capability: CAP_BPF is not in the effective set; ' +
      'grant CAP_BPF (and CAP_NET_ADMIN, CAP_PERFMON) or run as root'
    );
  if (privileges.seccomp === 2) {
    return (
      `blocked by seccomp: bpf() returned ${code} although CAP_BPF is effective; the ` +
      `container's seccomp profile refuses it (the default profile of podman, CRI-O and ` +
      `some containerd releases allows bpf() only with CAP_SYS_ADMIN); ${SECCOMP_FIX}`
    );
  }
  return (
    `bpf() returned ${code} although CAP_BPF is effective and no seccomp ` +
    `filter is on: a security module (SELinux, AppArmor, lockdown) refuses it`
  );
}
