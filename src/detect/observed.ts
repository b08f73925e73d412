// Correlator observations → 'active' findings, shared by the conntrack-based detectors.
import type { LbIngressIp, ServiceView } from '../cluster/types.js';
import { formatConntrack } from '../kernel/conntrack/format.js';
import type { ConntrackEntry } from '../kernel/types.js';
import { portKey } from '../model/service.js';
import type { DetectContext } from './context.js';
import type { FindingOf, LoopPath } from './core-types.js';
import type { Observations, ObsGroup } from './correlator.js';
import type { DetectorDef } from './detector.js';
import { credited, mitigationsFor, remedy } from './remedies.js';
import { finding, hostPort } from './tool-lines.js';

interface ActiveSpec<M extends string> {
  /** The detector the findings are of: its mechanism, fix and credits, and the observations it reads. */
  detector: Pick<DetectorDef<M>, 'mechanism' | 'fix' | 'credits' | 'observes'>;
  /** Labels for the entries of one example, e.g. ['outbound', 'return leg']. */
  labels: string[];
  summary(g: ObsGroup, first: ConntrackEntry[]): string;
  /** For paired examples: the roles of the outbound destination and the return leg's target, for the drawn path. */
  pathRoles?: [string, string] | ((first: ConntrackEntry[], s: ServiceView) => [string, string]);
  /** The LB IP the mitigations are looked up for: the first entry's destination unless the detector says. */
  vipOf?(first: ConntrackEntry[]): string;
  /** Lines added after the entries (e.g. the hostname lookup behind a resolved VIP). */
  extraEvidence?(s: ServiceView): string[];
  /** Advice added to the remedy for this Service (e.g. the AWS NLB settings). */
  extraRemedy?(s: ServiceView): string | undefined;
  /** The entries show a precondition, not a failure: with a credited mitigation in place they are info. */
  harmlessWhenCredited?: boolean;
}

export function activeFindings<M extends string>(
  ctx: DetectContext,
  obs: Observations,
  spec: ActiveSpec<M>,
): FindingOf<M>[] {
  const groups = obs.groups.filter((g) => spec.detector.observes.includes(g.kind));
  return groups.map((g) => {
    const first = g.examples[0]!;
    const evidence: string[] = [];
    for (const ex of g.examples)
      for (const [i, e] of ex.entries()) evidence.push(`conntrack ${spec.labels[i] ?? ''}: ${formatConntrack(e)}`);
    if (g.count > g.examples.length) evidence.push(`(${g.count - g.examples.length} more like these)`);
    evidence.push(...(spec.extraEvidence?.(g.svc) ?? []));
    const m = mitigationsFor(ctx, g.svc, spec.vipOf?.(first) ?? first[0]!.orig.dst);
    const fix = remedy(spec.detector, m, spec.extraRemedy?.(g.svc));
    const credits = spec.harmlessWhenCredited ? credited(spec.detector, m) : [];
    const summary = spec.summary(g, first) + (credits.length > 0 ? `; harmless here: ${credits.join('; ')}` : '');
    const severity = credits.length > 0 ? 'info' : 'active';
    const f = finding(g.svc, spec.detector.mechanism, severity, { summary, evidence, remedy: fix });
    const roles = typeof spec.pathRoles === 'function' ? spec.pathRoles(first, g.svc) : spec.pathRoles;
    if (first.length === 2 && roles) f.path = loopPath(first[0]!, first[1]!, spec.labels, roles);
    return f;
  });
}

/** A paired loop's path: the outbound entry (client → VIP) and the return leg the LB sent back. */
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
      {
        label: labels[1] ?? 'return leg',
        from: hostPort(back.orig.src, back.orig.sport),
        to: target,
        conntrack: formatConntrack(back),
      },
    ],
    reply: {
      from: server,
      to: hostPort(back.reply.dst, back.reply.dport),
      note: `the reply comes from ${server}, not from ${vip}: it skips the LB, and the client does not recognise it`,
    },
  };
}

export function activePorts(findings: FindingOf<string>[]): Set<string> {
  return new Set(findings.map((f) => portKey(f.service, f.port.protocol, f.port.port)));
}

/** `active`, then the risks `riskOf` sees at each LB ingress IP of the ports that `active` leaves. */
export function withIngressRisks<M extends string>(
  ctx: DetectContext,
  active: FindingOf<M>[],
  riskOf: (s: ServiceView, ing: LbIngressIp) => FindingOf<M> | FindingOf<M>[] | undefined,
): FindingOf<M>[] {
  const done = activePorts(active);
  // Usually nothing is active: then no port key is built for every Service port.
  const open = done.size === 0 ? ctx.services : ctx.services.filter((s) => !done.has(portKey(s, s.protocol, s.port)));
  return [...active, ...eachIngress(open, riskOf)];
}

/** What `fn` finds at each LB ingress IP of each Service port, in order. */
export function eachIngress<T>(
  services: ServiceView[],
  fn: (s: ServiceView, ing: LbIngressIp) => T | T[] | undefined,
): T[] {
  const out: T[] = [];
  for (const s of services) {
    for (const ing of s.lbIngress) {
      const found = fn(s, ing);
      if (Array.isArray(found)) out.push(...found);
      else if (found !== undefined) out.push(found);
    }
  }
  return out;
}
