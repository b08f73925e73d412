// Reads the node's iptables/ip6tables rules (both backends) and ipsets by
// running the save commands, optionally inside a named network namespace, and
// builds a NatSnapshot of the backend kube-proxy uses. Each command runs with a
// timeout; a missing binary or a permission error becomes a SourceStatus reason.
import { execFile, type ExecFileException } from 'node:child_process';
import type { SourceStatus } from '../types.js';
import { chooseBackend, type BackendOutput } from './backend.js';
import { parseIptablesSave } from './iptables-save.js';
import { parseIpsetSave } from './ipset.js';
import type { IptablesDump, IpsetDump, NatFamily, NatSnapshot, XtablesBackend } from './types.js';

export interface ReadNatOptions {
  /**
   * Network namespace to read instead of the current one: a name as `ip netns` knows it
   * (run through `ip netns exec NAME`), or a path such as /proc/PID/ns/net (through `nsenter --net=PATH`).
   */
  netns?: string;
  /** Per-command timeout; default 10 s (iptables-nft-save on 50k rules takes ~1 s). */
  timeoutMs?: number;
}

export interface ReadNatResult {
  nat?: NatSnapshot;
  sources: SourceStatus[];
}

const PACKAGE_OF: Record<string, string> = { ip: 'iproute2', nsenter: 'util-linux' };

type CommandResult = { ok: true; stdout: string } | { ok: false; reason: string };

const SAVE_COMMANDS: Record<XtablesBackend, Record<NatFamily, string>> = {
  legacy: { 4: 'iptables-legacy-save', 6: 'ip6tables-legacy-save' },
  nft: { 4: 'iptables-nft-save', 6: 'ip6tables-nft-save' },
};

export async function readNat(opts: ReadNatOptions = {}): Promise<ReadNatResult> {
  const t0 = performance.now();
  const run = (cmd: string, args: string[] = []): Promise<CommandResult> => runCommand(cmd, args, opts);
  const [l4, l6, n4, n6, sets] = await Promise.all([
    run(SAVE_COMMANDS.legacy[4]),
    run(SAVE_COMMANDS.legacy[6]),
    run(SAVE_COMMANDS.nft[4]),
    run(SAVE_COMMANDS.nft[6]),
    run('ipset', ['save']),
  ]);
  const natMs = performance.now() - t0;
  const ipset = ipsetSource(sets, natMs);
  const results = { legacy: { 4: l4, 6: l6 }, nft: { 4: n4, 6: n6 } } as const;
  const choice = chooseBackend(backendOutput(l4, l6), backendOutput(n4, n6));
  const v4res = results[choice.backend][4];
  const v6res = results[choice.backend][6];
  if (!v4res.ok) {
    const reason = withCommand(SAVE_COMMANDS[choice.backend][4], v4res.reason);
    return { sources: [{ source: 'nat', available: false, reason, durationMs: natMs }, ipset.status] };
  }
  const notes: string[] = [];
  let v4: IptablesDump;
  try {
    v4 = parseIptablesSave(v4res.stdout, { source: SAVE_COMMANDS[choice.backend][4], family: 4 });
  } catch (e) {
    const reason = e instanceof Error ? e.message : String(e);
    return { sources: [{ source: 'nat', available: false, reason, durationMs: natMs }, ipset.status] };
  }
  // IPv6 is a bonus: its failure is a note, not a lost snapshot.
  let v6: IptablesDump | undefined;
  if (!v6res.ok) notes.push(`IPv6 rules unavailable: ${withCommand(SAVE_COMMANDS[choice.backend][6], v6res.reason)}`);
  else {
    try {
      v6 = parseIptablesSave(v6res.stdout, { source: SAVE_COMMANDS[choice.backend][6], family: 6 });
    } catch (e) {
      notes.push(`IPv6 rules unavailable: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  const other: XtablesBackend = choice.backend === 'legacy' ? 'nft' : 'legacy';
  if (choice[other].kubeRuleLines > 0) {
    notes.push(
      `the ${other} backend also holds ${choice[other].kubeRuleLines} KUBE-* rule lines (stale rules from an earlier kube-proxy?)`,
    );
  }
  const nat: NatSnapshot = {
    backend: choice.backend,
    backendChoice: choice,
    v4,
    ...(v6 ? { v6 } : {}),
    ...(ipset.dump ? { ipsets: ipset.dump } : {}),
    warnings: notes,
  };
  const natStatus: SourceStatus = {
    source: 'nat',
    available: true,
    ...(notes.length > 0 ? { reason: notes.join('; ') } : {}),
    durationMs: natMs,
  };
  return { nat, sources: [natStatus, ipset.status] };
}

/** Prefixes the command unless the reason already names it (permission reasons start with 'permission denied'). */
function withCommand(cmd: string, reason: string): string {
  return reason.startsWith('permission denied') || reason.includes(cmd) ? reason : `${cmd}: ${reason}`;
}

function backendOutput(v4: CommandResult, v6: CommandResult): BackendOutput {
  const texts = [v4, v6].flatMap((r) => (r.ok ? [r.stdout] : []));
  const errors = [v4, v6].flatMap((r) => (r.ok ? [] : [r.reason]));
  return { texts, ...(errors.length > 0 ? { error: errors.join('; ') } : {}) };
}

function ipsetSource(res: CommandResult, durationMs: number): { status: SourceStatus; dump?: IpsetDump } {
  if (!res.ok) return { status: { source: 'ipset', available: false, reason: withCommand('ipset save', res.reason), durationMs } };
  try {
    const dump = parseIpsetSave(res.stdout, 'ipset save');
    return { status: { source: 'ipset', available: true, durationMs }, dump };
  } catch (e) {
    return { status: { source: 'ipset', available: false, reason: e instanceof Error ? e.message : String(e), durationMs } };
  }
}

/** Runs one command (inside the netns when asked) and explains a failure in one line. */
function runCommand(cmd: string, args: string[], opts: ReadNatOptions): Promise<CommandResult> {
  const timeout = opts.timeoutMs ?? 10_000;
  const [file, argv] = inNetns(cmd, args, opts.netns);
  return new Promise((resolve) => {
    execFile(
      file,
      argv,
      { timeout, killSignal: 'SIGKILL', maxBuffer: 256 * 1024 * 1024, env: { ...process.env, LC_ALL: 'C' } },
      (err, stdout, stderr) => {
        if (!err) return resolve({ ok: true, stdout });
        resolve({ ok: false, reason: explainFailure(err, String(stderr), file, cmd, timeout) });
      },
    );
  });
}

function inNetns(cmd: string, args: string[], netns: string | undefined): [string, string[]] {
  if (!netns) return [cmd, args];
  if (netns.includes('/')) return ['nsenter', [`--net=${netns}`, '--', cmd, ...args]];
  return ['ip', ['netns', 'exec', netns, cmd, ...args]];
}

/** One line; starts with 'permission denied' for privilege problems (the snapshot command checks that prefix). */
function explainFailure(
  err: ExecFileException,
  stderr: string,
  file: string,
  cmd: string,
  timeoutMs: number,
): string {
  if (err.code === 'ENOENT') return `${file} not found in PATH (install ${PACKAGE_OF[file] ?? 'the iptables/ipset package'})`;
  if (err.killed || err.signal === 'SIGKILL') return `timed out after ${timeoutMs} ms`;
  const msg = stderr.trim().split('\n')[0] ?? '';
  // `ip netns exec` reports a missing program itself.
  if (/(exec of .*|failed to execute .*): No such file or directory/.test(stderr)) {
    return `${cmd} not found in PATH (install the iptables/ipset package)`;
  }
  if (/permission denied|operation not permitted|you must be root/i.test(stderr)) {
    return `permission denied (needs root or CAP_NET_ADMIN): ${cmd}: ${msg}`;
  }
  if (/Cannot open network namespace/i.test(stderr)) return msg;
  return msg || `exited with ${err.code ?? err.signal}`;
}
