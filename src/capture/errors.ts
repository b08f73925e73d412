// Errors of the capture module that tell the operator what to change.

import { errText } from '../errors.js';
import { isPermissionErrno } from '../model/permission.js';
import { isSyscallError } from '../native/addon.js';
import { explainBpfRefusal, ownBpfPrivileges } from '../native/bpf-refusal.js';

export type CaptureStep = 'load' | 'attach' | 'maps' | 'pcap';

/** What each step needs beyond root. */
const CAPABILITIES: Record<CaptureStep, string> = {
  load: 'CAP_BPF and CAP_NET_ADMIN',
  attach: 'CAP_NET_ADMIN',
  maps: 'CAP_BPF',
  pcap: 'CAP_NET_RAW',
};

export class CaptureError extends Error {
  constructor(
    message: string,
    /** errno name from the kernel (EPERM, EINVAL, ...) or a capture-specific code. */
    readonly code: string,
    readonly step: CaptureStep,
  ) {
    super(message);
    this.name = 'CaptureError';
  }
}

/** The kernel lacks the command or hook, not the right: ENOTSUPP (524), EOPNOTSUPP, or EINVAL from older kernels. */
export function kernelLacksIt(e: unknown): boolean {
  return isSyscallError(e) && (e.errno === 524 || e.code === 'EOPNOTSUPP' || e.code === 'EINVAL');
}

/** The end of a verifier log, as libbpf prints it with a failed load. */
const VERIFIER_LOG = /-- END PROG LOAD LOG --|processed \d+ insns/;

/** Wraps an addon error: one line saying what failed and, for EPERM/EACCES, which capability to grant. */
export function captureError(e: unknown, step: CaptureStep, what: string): CaptureError {
  if (e instanceof CaptureError) return e;
  const code = isSyscallError(e) ? e.code : 'EUNKNOWN';
  const detail = errText(e);
  // The verifier's EACCES comes with its log: the program, not a privilege, is what this kernel refused.
  if (step === 'load' && VERIFIER_LOG.test(detail)) {
    return new CaptureError(`${what}: this kernel's verifier rejected the program (${detail})`, code, step);
  }
  // bpf() itself refused: say whether a capability, seccomp or the kernel is why.
  const bpfCause = step === 'load' || step === 'maps' ? explainBpfRefusal(code, ownBpfPrivileges()) : undefined;
  if (bpfCause) return new CaptureError(`${what}: ${bpfCause} (${detail})`, code, step);
  if (isPermissionErrno(code)) {
    return new CaptureError(
      `${what}: permission denied; run as root or grant ${CAPABILITIES[step]} (${detail})`,
      code,
      step,
    );
  }
  return new CaptureError(`${what}: ${detail}`, code, step);
}

/** Runs `run`; a failure becomes a CaptureError of `captureStep` saying `what` failed. */
export function step<T>(captureStep: CaptureStep, what: string, run: () => T): T {
  try {
    return run();
  } catch (e) {
    throw captureError(e, captureStep, what);
  }
}
