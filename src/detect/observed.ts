// Turning correlator observations into 'active' findings: shared by the
// conntrack-based detectors so each only says what its entries mean.
import type { ServiceView } from '../cluster/types.js';
import type { ConntrackEntry } from '../kernel/types.js';
import type { DetectContext } from './context.js';
import type { ObsGroup, ObsKind, Observations } from './correlator.js';
import { finding, formatConntrack } from './evidence.js';
import { credited, mitigationsFor, remedy } from './remedies.js';
import { hostPort } from './evidence.js';
import type { Finding, LoopPath, Mechanism } from './types.js';

export function groupsOf(obs: Observations, kind: ObsKind): ObsGroup[] {
  return obs.groups.filter((g) => g.kind === kind);
}

export interface ActiveSpec {
  kind: ObsKind;
  mechanism: Exclude<Mechanism, 'proxy-mode' | 'drift'>;
  /** Labels for the entries of one example, e.g. ['outbound', 'return leg']. */
  labels: string[];
  summary(g: ObsGroup, first: ConntrackEntry[]): string;
  /** For paired examples: the roles of the outbound destination and the return leg's target, for the drawn path. */
  pathRoles?: [string, string];
  /** The LB IP the mitigations are looked up for. */
  vipOf?(first: ConntrackEntry[], s: ServiceView): string | undefined;
  /** Lines added after the entries (e.g. the hostname lookup behind a resolved VIP). */
  extraEvidence?(s: ServiceView): string[];
  /** Advice added to the remedy for this Service (e.g. the AWS NLB settings). */
  extraRemedy?(s: ServiceView): string | undefined;
  /**
   * The entries show a precondition, not a failure: with a mitigation that counts against the
   * mechanism in place (e.g. an LB that connects from its own address), they are info.
   */
  harmlessWhenCredited?: boolean;
}

export function activeFindings(ctx: DetectContext, obs: Observations, spec: ActiveSpec): Finding[] {
  return groupsOf(obs, spec.kind).map((g) => {
    const first = g.examples[0]!;
    const evidence: string[] = [];
    for (const ex of g.examples) ex.forEach((e, i) => evidence.push(`conntrack ${spec.labels[i] ?? ''}: ${formatConntrack(e)}`));
    if (g.count > g.examples.length) evidence.push(`(${g.count - g.examples.length} more like these)`);
    evidence.push(...(spec.extraEvidence?.(g.svc) ?? []));
    const vip = spec.vipOf?.(first, g.svc);
    const m = mitigationsFor(ctx, g.svc, vip);
    const fix = remedy(spec.mechanism, m, spec.extraRemedy?.(g.svc));
    const credits = spec.harmlessWhenCredited ? credited(spec.mechanism, m) : [];
    const summary = spec.summary(g, first) + (credits.length > 0 ? `; harmless here: ${credits.join('; ')}` : '');
    const f = finding(g.svc, spec.mechanism, credits.length > 0 ? 'info' : 'active', summary, evidence, fix);
    if (first.length === 2 && spec.pathRoles) f.path = loopPath(first[0]!, first[1]!, spec.labels, spec.pathRoles);
    return f;
  });
}

/**
 * The path of a paired loop: the outbound entry (client → VIP) and the return leg the LB sent back
 * (→ this node's target, DNATed to the server, whose reply source is the server).
 */
function loopPath(out: ConntrackEntry, back: ConntrackEntry, labels: string[], roles: [string, string]): LoopPath {
  const client = hostPort(out.orig.src, out.orig.sport);
  const vip = hostPort(out.orig.dst, out.orig.dport);
  const target = hostPort(back.orig.dst, back.orig.dport);
  const server = hostPort(back.reply.src, back.reply.sport);
  const hops = [
    { role: 'client pod', address: client },
    { role: roles[0], address: vip },
    { role: roles[1], address: target },
  ];
  if (server !== target) hops.push({ role: 'server pod', address: server });
  return {
    hops,
    legs: [
      { label: labels[0] ?? 'outbound', from: client, to: vip, conntrack: formatConntrack(out) },
      { label: labels[1] ?? 'return leg', from: hostPort(back.orig.src, back.orig.sport), to: target, conntrack: formatConntrack(back) },
    ],
    reply: {
      from: server,
      to: hostPort(back.reply.dst, back.reply.dport),
      note: `the reply comes from ${server}, not from ${vip}: it skips the LB, and the client does not recognise it`,
    },
  };
}

/** Key of a Service port, to let active findings supersede the config ones for the same port. */
/**
 * A Service port's identity across cluster views, as one flat text (join): the agent keeps one per
 * Service port with finished flows, and a template literal's text is a tree of concatenations.
 */
export function portKey(s: { namespace: string; name: string }, proto: string, port: number): string {
  return [`${s.namespace}/${s.name}`, proto, port].join('|');
}

export function activePorts(findings: Finding[]): Set<string> {
  return new Set(findings.map((f) => portKey(f.service, f.port.protocol, f.port.port)));
}
