// Telling "blocked by seccomp" from "missing capability" and "kernel without
// BPF", from /proc/self/status files captured on this machine: the host's root,
// the DaemonSet's four capabilities without seccomp (setpriv), without CAP_BPF,
// and inside podman with the four capabilities under its default seccomp profile.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { captureError } from '../../../src/capture/errors.js';
import {
  explainBpfRefusal,
  ownBpfPrivileges,
  parseBpfPrivileges,
  parseCapLastCap,
} from '../../../src/native/bpf-refusal.js';

const status = (name: string): string =>
  readFileSync(join(import.meta.dirname, '../../fixtures/proc-status', name), 'utf8');
const privileges = (name: string) => parseBpfPrivileges(status(name));

describe('parseBpfPrivileges', () => {
  it('reads CapEff and the seccomp mode', () => {
    expect(privileges('four-caps-no-seccomp.txt')).toEqual({ capEff: 0xc000003000n, seccomp: 0 });
    expect(privileges('podman-four-caps-default-seccomp.txt')).toEqual({ capEff: 0xc000003000n, seccomp: 2 });
  });

  it('gives undefined for a status cut before CapEff, and for text that is no status file', () => {
    const whole = status('four-caps-no-seccomp.txt');
    expect(parseBpfPrivileges(whole.slice(0, whole.indexOf('CapEff:') + 5))).toBeUndefined();
    expect(parseBpfPrivileges('CapEff:\tzz\n')).toBeUndefined();
    expect(parseBpfPrivileges('')).toBeUndefined();
  });

  it('takes a status without a Seccomp line (kernels before 3.8) as no filter', () => {
    const noSeccomp = status('four-caps-no-seccomp.txt').replace(/^Seccomp.*\n/gm, '');
    expect(parseBpfPrivileges(noSeccomp)).toEqual({ capEff: 0xc000003000n, seccomp: 0 });
  });
});

describe('explainBpfRefusal', () => {
  it('EPERM with CAP_BPF effective under a seccomp filter: blocked by seccomp, and the fix', () => {
    const why = explainBpfRefusal('EPERM', privileges('podman-four-caps-default-seccomp.txt'));
    expect(why).toMatch(/^blocked by seccomp: bpf\(\) returned EPERM although CAP_BPF is effective/);
    expect(why).toContain('deploy/seccomp/clbprobe.json');
  });

  it('EPERM without CAP_BPF: missing capability', () => {
    expect(explainBpfRefusal('EPERM', privileges('no-bpf-cap.txt'))).toMatch(/^missing capability: CAP_BPF/);
  });

  it('EPERM with CAP_BPF and no seccomp filter: neither, a security module', () => {
    expect(explainBpfRefusal('EPERM', privileges('four-caps-no-seccomp.txt'))).toMatch(
      /no seccomp filter is on: a security module/,
    );
    expect(explainBpfRefusal('EPERM', privileges('host-root.txt'))).toMatch(/security module/);
  });

  it('ENOSYS: kernel without BPF (or, under a filter, a profile that does not list bpf)', () => {
    expect(explainBpfRefusal('ENOSYS', privileges('four-caps-no-seccomp.txt'))).toMatch(
      /^kernel without BPF: .*CONFIG_BPF_SYSCALL/,
    );
    expect(explainBpfRefusal('ENOSYS', privileges('podman-four-caps-default-seccomp.txt'))).toMatch(
      /^kernel without BPF, or a seccomp profile/,
    );
  });

  it('other errors and an unreadable status say nothing', () => {
    expect(explainBpfRefusal('EINVAL', privileges('four-caps-no-seccomp.txt'))).toBeUndefined();
    expect(explainBpfRefusal('EPERM', undefined)).toBeUndefined();
  });
});

describe('kernels before 5.8 (no CAP_BPF): told apart from a missing grant, with the fallback and the opt-in', () => {
  // What TKE's 5.4 and Alibaba Cloud Linux 2's 4.19 show: cap_last_cap 37 (CAP_AUDIT_READ); the
  // runtime cannot add bits 38 and 39, so CapEff is the DaemonSet's NET_ADMIN and NET_RAW only.
  const old = (name: string, capLastCap: number | undefined, kernel = '5.4.119-19-0009.11') => ({
    ...privileges(name)!,
    capLastCap,
    kernel,
  });

  it('EPERM without CAP_BPF on a kernel whose capabilities end at 37: this kernel has no CAP_BPF, the cost, the component', () => {
    const why = explainBpfRefusal('EPERM', old('no-bpf-cap.txt', 37));
    expect(why).toMatch(
      /^this kernel has no CAP_BPF: 5\.4\.119-19-0009\.11 knows capabilities up to 37 \(CAP_BPF and CAP_PERFMON came with Linux 5\.8\), so bpf\(\) needs CAP_SYS_ADMIN/,
    );
    expect(why).toContain('counters fall back to pcap');
    expect(why).toContain('conntrack events are filtered in user space');
    expect(why).toContain('deploy/components/pre-5.8');
    expect(explainBpfRefusal('EPERM', old('no-bpf-cap.txt', 38))).toMatch(/^this kernel has no CAP_BPF/); // 5.8-rc: PERFMON only
  });

  it('the same refusal where the kernel has CAP_BPF (cap_last_cap 39 and up) is a missing grant', () => {
    expect(explainBpfRefusal('EPERM', old('no-bpf-cap.txt', 39))).toMatch(/^missing capability: CAP_BPF/);
    expect(explainBpfRefusal('EPERM', old('no-bpf-cap.txt', 40))).toMatch(/^missing capability: CAP_BPF/);
  });

  it('an unreadable cap_last_cap is not taken as an old kernel', () => {
    expect(explainBpfRefusal('EPERM', old('no-bpf-cap.txt', undefined))).toMatch(/^missing capability: CAP_BPF/);
    expect(parseCapLastCap('37\n')).toBe(37);
    expect(parseCapLastCap('')).toBeUndefined();
    expect(parseCapLastCap('x')).toBeUndefined();
  });

  it('with CAP_SYS_ADMIN (the pre-5.8 component) an old kernel is no reason: the refusal is explained as on any kernel', () => {
    // host-root.txt has every capability, CAP_SYS_ADMIN among them.
    expect(explainBpfRefusal('EPERM', old('host-root.txt', 37))).toMatch(/security module/);
    expect(
      explainBpfRefusal('EPERM', { ...old('podman-four-caps-default-seccomp.txt', 37), capEff: 1n << 21n }),
    ).toMatch(/^blocked by seccomp/);
  });

  it("this machine's own inputs: its cap_last_cap read, and a kernel with CAP_BPF", () => {
    const own = ownBpfPrivileges();
    expect(own?.capLastCap).toBeGreaterThanOrEqual(39);
    expect(own?.kernel).toMatch(/^\d+\.\d+/);
  });
});

describe('captureError', () => {
  it('names the cause of a refused load in the one line the log and source_up carry', () => {
    const e = Object.assign(new Error("Couldn't load trivial BPF program. Operation not permitted"), {
      code: 'EPERM',
      errno: 1,
      syscall: 'bpf',
    });
    const err = captureError(e, 'load', 'loading the eBPF counter program');
    expect(err.code).toBe('EPERM');
    // This process's own status decides the clause; as root on the host it has CAP_BPF.
    expect(err.message).toMatch(
      /^loading the eBPF counter program: (blocked by seccomp|bpf\(\) returned EPERM although|missing capability)/,
    );
    expect(err.message).toContain("Couldn't load trivial BPF program");
  });
  it("a verifier's EACCES is the program refused by this kernel's verifier, not a security module", () => {
    // The tail of what 5.10.0-46's verifier said before the NodePort index was masked (test/vm/kernel-matrix.sh).
    const log = `bpf_object__load (R7_w=inv8192 R8=inv17 R10=fp0 fp-112=ctx invalid access to map value, value_size=49152 off=536903672 size=8 R1 max value is outside of the allowed memory range processed 175 insns (limit 1000000) max_states_per_insn 0 total_states 12 peak_states 12 mark_read 8 -- END PROG LOAD LOG -- libbpf: prog 'clbp_ingress': failed to load: -13 libbpf: failed to load object 'clbprobe.bpf.o' ): Permission denied`;
    const e = Object.assign(new Error(log), { code: 'EACCES', errno: 13, syscall: log });
    const err = captureError(e, 'load', 'loading the eBPF counter program');
    expect(err.code).toBe('EACCES');
    expect(err.message).toMatch(
      /^loading the eBPF counter program: this kernel's verifier rejected the program \(bpf_object__load .*invalid access to map value/,
    );
    expect(err.message).not.toMatch(/security module|seccomp|capability/);
    // The same errno without a log is still a refusal to explain.
    const bare = captureError(
      Object.assign(new Error('Permission denied'), { code: 'EACCES', errno: 13 }),
      'load',
      'loading',
    );
    expect(bare.message).not.toMatch(/verifier/);
  });
});
