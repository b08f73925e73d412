// removeTcLeftovers' identity check on a fake of the addon's tc and program-info calls: a filter at our
// handle/priority goes when it runs our programs, or when, as in the DaemonSet without CAP_SYS_ADMIN, the
// kernel will not say which program it runs; someone else's stays.
import { describe, expect, it } from 'vitest';
import { removeTcLeftovers, TC_HANDLE, TC_PRIORITY } from '../../../src/capture/attach.js';
import { PROG_EGRESS, PROG_INGRESS } from '../../../src/capture/bpf-layout.js';
import type { BpfAddon } from '../../../src/native/bpf.js';

/** A kernel with a filter at our handle/priority on both hooks (ids 7 and 8), and what reading program 7 or 8 gives. */
function kernel(progInfo: (id: number) => { name: string } | null) {
  const detached: boolean[] = [];
  const addon = {
    bpfTcQuery: (_if: string, egress: boolean, handle: number, prio: number) =>
      handle === TC_HANDLE && prio === TC_PRIORITY ? (egress ? 8 : 7) : 0,
    bpfProgInfoById: progInfo,
    bpfTcDetach: (_if: string, egress: boolean) => detached.push(egress) > 0,
  } as unknown as BpfAddon;
  return { addon, detached };
}

const eperm = (): never => {
  throw Object.assign(new Error('bpf_prog_get_fd_by_id: Operation not permitted'), { code: 'EPERM', errno: 1 });
};

describe('removeTcLeftovers', () => {
  it('removes the filters that run our programs', () => {
    const k = kernel((id) => ({ name: id === 7 ? PROG_INGRESS : PROG_EGRESS }));
    expect(removeTcLeftovers(k.addon, { ifname: 'eth0' })).toBe(2);
    expect(k.detached).toEqual([false, true]);
  });

  it('leaves a filter at our handle/priority that runs someone else’s program', () => {
    const k = kernel((id) => ({ name: id === 7 ? 'cilium_ingress' : PROG_EGRESS }));
    expect(removeTcLeftovers(k.addon, { ifname: 'eth0' })).toBe(1);
    expect(k.detached).toEqual([true]);
  });

  it('takes our handle/priority as ours where reading the program needs CAP_SYS_ADMIN (EPERM)', () => {
    const k = kernel(eperm);
    expect(removeTcLeftovers(k.addon, { ifname: 'eth0' })).toBe(2);
    expect(k.detached).toEqual([false, true]);
  });

  it('fails on any other error reading the program', () => {
    const k = kernel(() => {
      throw Object.assign(new Error('bpf_prog_get_fd_by_id: Bad address'), { code: 'EFAULT', errno: 14 });
    });
    expect(() => removeTcLeftovers(k.addon, { ifname: 'eth0' })).toThrow(/Bad address/);
    expect(k.detached).toEqual([]);
  });
});
