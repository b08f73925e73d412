// Attaches the counter programs at tc ingress and egress: TCX (kernel >= 6.6) first in the chain so a redirecting CNI
// cannot hide packets, else cls_bpf filters under our handle; a clsact qdisc is never deleted (the CNI may use it).
import { errText } from '../errors.js';
import type { Logger } from '../log.js';
import { isSyscallError } from '../native/addon.js';
import type { BpfAddon } from '../native/bpf.js';
import { PROG_EGRESS, PROG_INGRESS } from './bpf-layout.js';
import { captureError, kernelLacksIt, step } from './errors.js';

export type AttachMode = 'tcx' | 'tc';

/** Our cls_bpf filter identity: handle and priority (pref) on both hooks. */
export const TC_HANDLE = 0xc1b0;
export const TC_PRIORITY = 0xc1b;
/** BPF_F_BEFORE without a relative program: the front of the TCX chain. */
const BPF_F_BEFORE = 1 << 3;
const OUR_PROGRAMS = new Set([PROG_INGRESS, PROG_EGRESS]);

export interface AttachTarget {
  ifname: string;
  netnsPath?: string;
}

export interface Attachment {
  mode: AttachMode;
  detach(): void;
  /** The interface is gone with its hooks: let go of TCX link fds without naming it again; detach() is then a no-op. */
  release(): void;
}

const HOOKS = [
  { egress: false, prog: PROG_INGRESS },
  { egress: true, prog: PROG_EGRESS },
] as const;
type Hook = (typeof HOOKS)[number];

/** A program's name cannot be read by id without CAP_SYS_ADMIN, which the DaemonSet does not grant. */
const NAME_UNREADABLE = Symbol('name unreadable');

/** The name of program `id` (undefined: no such program); where unreadable, our handle and priority identify it. */
function programName(addon: BpfAddon, id: number): string | undefined | typeof NAME_UNREADABLE {
  try {
    return addon.bpfProgInfoById(id)?.name;
  } catch (e) {
    if (isSyscallError(e) && e.code === 'EPERM') return NAME_UNREADABLE;
    throw e;
  }
}

/** Removes a crashed run's cls_bpf filters at our handle and priority, sparing other programs; returns the count. */
export function removeTcLeftovers(addon: BpfAddon, t: AttachTarget, log?: Logger): number {
  let removed = 0;
  for (const { egress } of HOOKS) {
    const hook = egress ? 'egress' : 'ingress';
    const id = addon.bpfTcQuery(t.ifname, egress, TC_HANDLE, TC_PRIORITY, t.netnsPath);
    if (!id) continue;
    const name = programName(addon, id);
    if (name !== NAME_UNREADABLE && (name === undefined || !OUR_PROGRAMS.has(name))) {
      log?.warn(
        { ifname: t.ifname, hook, progId: id, progName: name },
        'tc filter at our handle/priority is not ours; leaving it',
      );
      continue;
    }
    if (addon.bpfTcDetach(t.ifname, egress, TC_HANDLE, TC_PRIORITY, t.netnsPath)) {
      removed++;
      log?.info({ ifname: t.ifname, hook, progId: id }, 'removed a cls_bpf filter left by a previous run');
    }
  }
  return removed;
}

/** Attaches one hook after the other; a failure undoes those attached, and detach or release runs once per hook. */
function attachHooks<T>(
  mode: AttachMode,
  attach: (hook: Hook) => T,
  detach: (attached: T) => void,
  release: (attached: T) => void,
): Attachment {
  let attached: T[] = [];
  const undo = (each: (a: T) => void) => {
    const was = attached;
    attached = [];
    for (const a of was) each(a);
  };
  try {
    for (const h of HOOKS) attached.push(attach(h));
  } catch (e) {
    undo(detach);
    throw e;
  }
  return { mode, detach: () => undo(detach), release: () => undo(release) };
}

function attachTcx(addon: BpfAddon, progFds: Record<string, number>, t: AttachTarget): Attachment {
  const attach = (h: Hook) => addon.bpfTcxAttach(progFds[h.prog]!, t.ifname, h.egress, BPF_F_BEFORE, t.netnsPath);
  const detach = (fd: number) => addon.bpfLinkDetach(fd);
  // A defunct link's fd is closed by the detach also when the kernel refuses it.
  const release = (fd: number) => {
    try {
      addon.bpfLinkDetach(fd);
    } catch {}
  };
  return attachHooks('tcx', attach, detach, release);
}

function attachTc(addon: BpfAddon, progFds: Record<string, number>, t: AttachTarget): Attachment {
  const attach = (h: Hook) => {
    addon.bpfTcAttach(t.ifname, h.egress, TC_HANDLE, TC_PRIORITY, progFds[h.prog]!, t.netnsPath);
    return h.egress;
  };
  const detach = (egress: boolean) => addon.bpfTcDetach(t.ifname, egress, TC_HANDLE, TC_PRIORITY, t.netnsPath);
  // The filters died with the interface's qdisc: nothing to let go of.
  return attachHooks('tc', attach, detach, () => {});
}

/** Attaches both programs; 'auto' tries TCX and falls back to cls_bpf. */
export function attachPrograms(
  addon: BpfAddon,
  progFds: Record<string, number>,
  t: AttachTarget,
  mode: AttachMode | 'auto',
  log?: Logger,
): Attachment {
  const what = (m: string) => `attaching the eBPF counters to ${t.ifname} (${m})`;
  if (mode !== 'tc') {
    try {
      return attachTcx(addon, progFds, t);
    } catch (e) {
      if (mode === 'tcx' || !kernelLacksIt(e)) throw captureError(e, 'attach', what('TCX'));
      log?.info({ ifname: t.ifname, reason: errText(e) }, 'TCX unavailable, using legacy tc cls_bpf');
    }
  }
  return step('attach', what('tc cls_bpf'), () => attachTc(addon, progFds, t));
}
