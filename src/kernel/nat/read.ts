// The node's iptables/ip6tables rules (both backends) and ipsets from the save commands, each bounded (command.ts);
// a facts-only read keeps only the nat table's lines (nat-lines.ts) while hashing and counting the rest.

import { errText } from '../../errors.js';
import type { SourceStatus } from '../../model/source-status.js';
import { BackendCounter, type BackendSide, chooseBackendOf } from './backend.js';
import { type CommandOptions, type CommandResult, runCommand, runCommandLines, withCommand } from './command.js';
import { parseIpsetSave } from './ipset.js';
import { parseIptablesSave } from './iptables-save.js';
import { eachLine } from './lines.js';
import { NatLineStore } from './nat-lines.js';
import { NatRules, type SaveRulesInput } from './nat-rules.js';
import { combineDigests, type DigestPart, outputDigest, SaveHash } from './save-digest.js';
import type { IpsetDump, IpsetSet, IptablesDump, NatFamily, NatSnapshot, XtablesBackend } from './types.js';

export interface ReadNatOptions {
  /** Namespace to read: an `ip netns` name (`ip netns exec`) or a path like /proc/PID/ns/net (`nsenter --net`). */
  netns?: string;
  timeoutMs?: number;
  /** Bound on each command's output (default NAT_OUTPUT_MAX_BYTES); past it the source is unavailable. */
  maxOutputBytes?: number;
  /** Digest of an earlier read: unchanged command output is not parsed and gives `{ unchanged: true }`. */
  unchangedSince?: string;
  /** Keep only the nat table's lines, read through NatRules, so no caller holds every parsed rule at once. */
  factsOnly?: boolean;
  /** The filter table's chains whose rules a facts-only read keeps (NatRules.filterRules); default none. */
  filterChains?: readonly string[];
  /** Bound on one line in a facts-only read (default NAT_LINE_MAX_BYTES); past it the source is unavailable. */
  maxLineBytes?: number;
}

export interface ReadNatResult {
  /** In a facts-only read, without v4, v6 and ipsets: they are in `tables`. */
  nat?: NatSnapshot;
  /** A facts-only read's nat tables (IPv4, then IPv6 if readable) and ipsets, to derive the facts from. */
  tables?: NatTables;
  /** Empty when unchanged: the earlier read's statuses still hold. */
  sources: SourceStatus[];
  /** Of the command outputs (natDigest), for the next read's unchangedSince. */
  digest: string;
  /** The outputs equal those of the read whose digest was passed as unchangedSince. */
  unchanged?: true;
}

/** Default bound on one save command's output, well above what kube-proxy prints for the largest clusters. */
export const NAT_OUTPUT_MAX_BYTES = 64 * 1024 * 1024;

/** Bound on one line in a facts-only read; older iptables-restore reads lines into a 10 KiB buffer. */
export const NAT_LINE_MAX_BYTES = 64 * 1024;

export interface NatTables {
  rules: NatRules[];
  ipsets: IpsetSet[];
}

type DigestInput = { ok: true; stdout: string | Uint8Array } | { ok: false; reason: string };

/** What the save commands said without per-run changes (timestamps, counters: save-digest.ts). */
export function natDigest(results: readonly DigestInput[]): string {
  return combineDigests(results.map((r) => (r.ok ? { ok: true, digest: outputDigest(r.stdout) } : r)));
}

const SAVE_COMMANDS: Record<XtablesBackend, Record<NatFamily, string>> = {
  legacy: { 4: 'iptables-legacy-save', 6: 'ip6tables-legacy-save' },
  nft: { 4: 'iptables-nft-save', 6: 'ip6tables-nft-save' },
};

/** One save command's output as the reader took it: counted and hashed, and what it kept of it. */
type SaveRead =
  | { ok: true; digest: string; counts: BackendCounter; kept: Buffer | NatLineStore }
  | { ok: false; reason: string };

export async function readNat(opts: ReadNatOptions = {}): Promise<ReadNatResult> {
  const t0 = performance.now();
  const cmdOpts: CommandOptions = {
    ...(opts.netns ? { netns: opts.netns } : {}),
    timeoutMs: opts.timeoutMs ?? 10_000,
    maxBytes: opts.maxOutputBytes ?? NAT_OUTPUT_MAX_BYTES,
  };
  const maxLineBytes = opts.maxLineBytes ?? NAT_LINE_MAX_BYTES;
  const filterChains = opts.filterChains ?? [];
  const save = (cmd: string): Promise<SaveRead> =>
    opts.factsOnly ? saveLines(cmd, cmdOpts, maxLineBytes, filterChains) : saveWhole(cmd, cmdOpts);
  const [l4, l6, n4, n6, sets] = await Promise.all([
    save(SAVE_COMMANDS.legacy[4]),
    save(SAVE_COMMANDS.legacy[6]),
    save(SAVE_COMMANDS.nft[4]),
    save(SAVE_COMMANDS.nft[6]),
    runCommand('ipset', ['save'], cmdOpts),
  ]);
  const natMs = performance.now() - t0;
  const digest = combineDigests(
    [l4, l6, n4, n6, sets].map(
      (r): DigestPart => (!r.ok ? r : 'digest' in r ? r : { ok: true, digest: outputDigest(r.stdout) }),
    ),
  );
  if (digest === opts.unchangedSince) return { sources: [], digest, unchanged: true };
  const ipset = ipsetSource(sets, natMs);
  const results = { legacy: { 4: l4, 6: l6 }, nft: { 4: n4, 6: n6 } } as const;
  const choice = chooseBackendOf(backendSide(l4, l6), backendSide(n4, n6));
  const natDown = (reason: string): ReadNatResult => ({
    sources: [{ source: 'nat', available: false, reason, durationMs: natMs }, ipset.status],
    digest,
  });
  /** The family's rules, or why they could not be read. */
  const readFamily = (family: NatFamily): IptablesDump | NatRules | string => {
    const res = results[choice.backend][family];
    const source = SAVE_COMMANDS[choice.backend][family];
    if (!res.ok) return withCommand(source, res.reason);
    try {
      return readKept(res.kept, { source, family, filterChains });
    } catch (e) {
      return errText(e);
    }
  };
  const v4 = readFamily(4);
  if (typeof v4 === 'string') return natDown(v4);
  const notes: string[] = [];
  // IPv6 is a bonus: its failure is a note, not a lost snapshot.
  const v6read = readFamily(6);
  if (typeof v6read === 'string') notes.push(`IPv6 rules unavailable: ${v6read}`);
  const v6 = typeof v6read === 'string' ? undefined : v6read;
  const unreadable = typeof v6read === 'string' ? { unreadable: { 6: v6read } } : {};
  const other: XtablesBackend = choice.backend === 'legacy' ? 'nft' : 'legacy';
  if (choice[other].kubeRuleLines > 0) {
    notes.push(
      `the ${other} backend also holds ${choice[other].kubeRuleLines} ` +
        `KUBE-* rule lines (stale rules from an earlier kube-proxy?)`,
    );
  }
  let nat: NatSnapshot;
  let tables: NatTables | undefined;
  if (v4 instanceof NatRules) {
    nat = { backend: choice.backend, backendChoice: choice, ...unreadable, warnings: notes };
    tables = {
      rules: [v4, v6].filter((t): t is NatRules => t instanceof NatRules),
      ipsets: ipset.dump?.sets ?? [],
    };
  } else {
    nat = {
      backend: choice.backend,
      backendChoice: choice,
      v4,
      ...(v6 && !(v6 instanceof NatRules) ? { v6 } : {}),
      ...(ipset.dump ? { ipsets: ipset.dump } : {}),
      ...unreadable,
      warnings: notes,
    };
  }
  const natStatus: SourceStatus = {
    source: 'nat',
    available: true,
    ...(notes.length > 0 ? { reason: notes.join('; ') } : {}),
    durationMs: natMs,
  };
  return { nat, ...(tables ? { tables } : {}), sources: [natStatus, ipset.status], digest };
}

/** The whole output parsed (snapshot), or the nat table's kept lines parsed a rule at a time (facts-only). */
function readKept(kept: Buffer | NatLineStore, input: SaveRulesInput): IptablesDump | NatRules {
  if (kept instanceof NatLineStore) return new NatRules(kept, input);
  return parseIptablesSave(kept.toString('utf8'), { source: input.source, family: input.family });
}

/** Facts-only: the output a line at a time, hashed, counted, and its nat table's lines kept. */
async function saveLines(
  cmd: string,
  opts: CommandOptions,
  maxLineBytes: number,
  filterChains: readonly string[],
): Promise<SaveRead> {
  const hash = new SaveHash();
  const counts = new BackendCounter();
  const kept = new NatLineStore(maxLineBytes, filterChains);
  const r = await runCommandLines(cmd, [], { ...opts, maxLineBytes }, (buf, start, end, lineNo, terminated) => {
    hash.line(buf, start, end, terminated);
    counts.line(buf, start, end, terminated);
    kept.line(buf, start, end, lineNo, terminated);
  });
  if (!r.ok) return r;
  kept.end();
  return { ok: true, digest: hash.digest(), counts, kept };
}

/** The whole output (snapshot parses every table), hashed and counted the same way. */
async function saveWhole(cmd: string, opts: CommandOptions): Promise<SaveRead> {
  const r = await runCommand(cmd, [], opts);
  if (!r.ok) return r;
  const counts = new BackendCounter();
  const out = r.stdout;
  eachLine(out, (start, end) => counts.line(out, start, end, end < out.length));
  return { ok: true, digest: outputDigest(out), counts, kept: out };
}

function backendSide(v4: SaveRead, v6: SaveRead): BackendSide {
  const read = [v4, v6].filter((r) => r.ok);
  const errors = [v4, v6].flatMap((r) => (r.ok ? [] : [r.reason]));
  const counts = new BackendCounter();
  for (const r of read) {
    counts.ruleLines += r.counts.ruleLines;
    counts.kubeRuleLines += r.counts.kubeRuleLines;
    counts.kubeletChains ||= r.counts.kubeletChains;
  }
  return { evidence: counts.evidence(errors.length > 0 ? errors.join('; ') : undefined), readable: read.length > 0 };
}

function ipsetSource(res: CommandResult, durationMs: number): { status: SourceStatus; dump?: IpsetDump } {
  if (!res.ok)
    return { status: { source: 'ipset', available: false, reason: withCommand('ipset save', res.reason), durationMs } };
  try {
    const dump = parseIpsetSave(res.stdout, 'ipset save');
    return { status: { source: 'ipset', available: true, durationMs }, dump };
  } catch (e) {
    return { status: { source: 'ipset', available: false, reason: errText(e), durationMs } };
  }
}
