// Kubernetes Events for LB loopback, recorded cluster-wide by the relay so `kubectl get events` shows loops: a first
// loop gets Warning LoadBalancerLoopback, the last one's end Normal LoadBalancerLoopbackCleared (silent ≠ cleared).
// Rate-limited and named by Service, kind and time bucket so a second replica gets 409; needs create on events.
import { createHash } from 'node:crypto';
import { TokenBucket } from '../agent/kube-authorizer.js';
import { postJson } from '../cluster/api-post.js';
import { isStr } from '../cluster/fields.js';
import type { ApiTarget } from '../cluster/kube-config.js';
import { byText } from '../compare.js';
import { firstOf } from '../detect/tool-lines.js';
import { errText } from '../errors.js';
import { planNodes } from './agent-pods.js';
import { type AgentSink, type AgentsOptions, eachPod } from './relay-common.js';
import { type AgentAsk, askFindings } from './status.js';

export const EVENT_REASON = 'LoadBalancerLoopback';
export const EVENT_REASON_CLEARED = 'LoadBalancerLoopbackCleared';
const COMPONENT = 'clbprobe-evidence-relay';

/** An Event to create: on which Service, which kind, what it says. */
export interface LoopEvent {
  namespace: string;
  service: string;
  type: 'Warning' | 'Normal';
  reason: typeof EVENT_REASON | typeof EVENT_REASON_CLEARED;
  message: string;
}

export interface EventRecorderOptions extends AgentAsk, Pick<AgentsOptions, 'listPods' | 'container' | 'concurrency'> {
  /** Creates one Event; 'exists' when its name is taken (another replica recorded it). */
  create: (e: LoopEvent, name: string) => Promise<'created' | 'exists'>;
  /** Time between two Warnings for one Service. */
  quietPeriodMs: number;
  /** Events per minute for the whole relay, and the burst. */
  perMinute: number;
  burst: number;
  now?: () => number;
  log?: { warn(o: object, msg: string): void; info(o: object, msg: string): void };
}

/** Node -> the mechanisms active there, and a fix line. */
type ActiveNodes = Map<string, { mechanisms: Set<string>; fix?: string }>;

/** The fields of an agent's finding line that an Event uses, unchecked. */
interface ActiveFinding {
  service?: { namespace?: unknown; name?: unknown };
  mechanism?: unknown;
  severity?: unknown;
  fixes?: { command?: unknown }[];
  remedy?: unknown;
}

/** At most this many Services are followed (a cluster with more active loops than this has bigger news). */
const MAX_SERVICES = 10_000;
/** Characters of an Event message (the API server allows 1 KiB in events.k8s.io; core/v1 more). */
const MAX_MESSAGE = 1000;

export class EventRecorder {
  /** Services with a loop on some node, or whose end is not recorded yet; warned: their Warning is recorded. */
  private readonly services = new Map<string, { nodes: ActiveNodes; warned: boolean }>();
  private readonly lastWarning = new Map<string, number>();
  private readonly bucket: TokenBucket;
  private readonly now: () => number;
  /** Events created, and those not created (rate limit, AlreadyExists, errors), for the log and tests. */
  readonly counts = { created: 0, exists: 0, limited: 0, failed: 0 };

  constructor(private readonly o: EventRecorderOptions) {
    this.now = o.now ?? Date.now;
    this.bucket = new TokenBucket({ perSecond: o.perMinute / 60, burst: o.burst }, this.now);
  }

  /** One round: ask every agent, record what started and what ended. */
  async poll(): Promise<LoopEvent[]> {
    const plan = planNodes(await this.o.listPods(), this.o.container);
    const answered = new Set<string>();
    const seen = new Map<string, ActiveNodes>();
    await eachPod(plan.ask, this.o.concurrency, async (pod) => {
      // Collects the agent's finding lines (askFindings bounds their bytes); it never waits for 'drain' or 'close'.
      const lines: string[] = [];
      const sink: AgentSink = { write: (text) => lines.push(text) > 0, once: () => sink, off: () => sink };
      const r = await askFindings(this.o, pod, undefined, sink);
      if (r.status !== 'ok' || r.unchecked) {
        this.o.log?.warn(
          { node: pod.node, error: r.error ?? r.uncheckedReason },
          'events: agent not read, its last answer stands',
        );
        return;
      }
      answered.add(pod.node);
      for (const text of lines) {
        const f = JSON.parse(text) as ActiveFinding;
        const { namespace, name } = f.service ?? {};
        if (f.severity !== 'active' || !isStr(namespace) || !isStr(name) || !isStr(f.mechanism)) continue;
        const key = `${namespace}/${name}`;
        const nodes = seen.get(key) ?? new Map();
        const at = nodes.get(pod.node) ?? { mechanisms: new Set<string>() };
        at.mechanisms.add(f.mechanism.slice(0, 40));
        at.fix ??= oneLineFix(f);
        nodes.set(pod.node, at);
        seen.set(key, nodes);
      }
    });
    for (const [key, nodes] of seen) {
      const was = this.services.get(key);
      if (!was && this.services.size >= MAX_SERVICES) continue;
      const merged = new Map(was?.nodes ?? []);
      for (const n of answered) merged.delete(n);
      for (const [n, v] of nodes) merged.set(n, v);
      this.services.set(key, { nodes: merged, warned: was?.warned ?? false });
    }
    // A node that had a loop and answered without it no longer has it; one that did not answer keeps its last answer.
    for (const [key, s] of this.services) if (!seen.has(key)) for (const n of answered) s.nodes.delete(n);
    // The last Event on each Service says its state: one not recorded (quiet period, rate limit, an error) is tried
    // again next round, and a loop no Warning announced ends without a word.
    const recorded: LoopEvent[] = [];
    for (const [key, s] of this.services) {
      const active = s.nodes.size > 0;
      if (!active && !s.warned) {
        this.services.delete(key);
        continue;
      }
      if (active === s.warned) continue;
      const event = active ? this.warning(key, s.nodes) : clearedEvent(key);
      const r = await this.record(event);
      if (r === undefined) continue;
      if (r === 'created') recorded.push(event);
      if (active) s.warned = true;
      else this.services.delete(key);
    }
    return recorded;
  }

  private warning(key: string, nodes: ActiveNodes): LoopEvent {
    const [namespace, service] = key.split('/') as [string, string];
    const byMech = new Map<string, string[]>();
    for (const [n, v] of nodes) for (const m of v.mechanisms) byMech.set(m, [...(byMech.get(m) ?? []), n]);
    const what = [...byMech]
      .map(([m, ns]) => `${m} on ${ns.length} node(s): ${firstOf(ns.sort(byText), 5)}`)
      .join('; ');
    const fix = [...nodes.values()].map((v) => v.fix).find((f) => f !== undefined);
    const message = `LB loopback active: ${what}.${fix ? ` Fix: ${fix}` : ''}`;
    return {
      namespace,
      service,
      type: 'Warning',
      reason: EVENT_REASON,
      message: message.length > MAX_MESSAGE ? `${message.slice(0, MAX_MESSAGE - 1)}…` : message,
    };
  }

  /** Creates the Event; 'exists' when another replica did, undefined when it was not recorded (and says why). */
  private async record(event: LoopEvent): Promise<'created' | 'exists' | undefined> {
    const key = `${event.namespace}/${event.service}`;
    const now = this.now();
    if (event.type === 'Warning') {
      const last = this.lastWarning.get(key);
      if (last !== undefined && now - last < this.o.quietPeriodMs) return this.limited(event, 'quiet period');
    }
    if (this.bucket.take()) return this.limited(event, 'rate limit');
    try {
      const r = await this.o.create(event, eventName(event, now, this.o.quietPeriodMs));
      this.counts[r]++;
      if (r === 'created') this.o.log?.info({ service: key, reason: event.reason }, 'event recorded');
      if (event.type === 'Warning') {
        this.lastWarning.set(key, now);
        while (this.lastWarning.size > MAX_SERVICES) this.lastWarning.delete(this.lastWarning.keys().next().value!);
      }
      return r;
    } catch (err) {
      this.counts.failed++;
      this.o.log?.warn({ service: key, reason: event.reason, err: errText(err) }, 'event not recorded');
      return undefined;
    }
  }

  private limited(e: LoopEvent, why: string): undefined {
    this.counts.limited++;
    this.o.log?.warn({ service: `${e.namespace}/${e.service}`, reason: e.reason, why }, 'event not recorded');
    return undefined;
  }
}

/** The Normal Event that ends a Service's loop. */
function clearedEvent(key: string): LoopEvent {
  const [namespace, service] = key.split('/') as [string, string];
  return {
    namespace,
    service,
    type: 'Normal',
    reason: EVENT_REASON_CLEARED,
    message: 'LB loopback no longer active on any node that answered',
  };
}

/** The first fix command of a finding, else the first sentence of its remedy. */
function oneLineFix(finding: ActiveFinding): string | undefined {
  const cmd = finding.fixes?.find((x) => typeof x.command === 'string')?.command as string | undefined;
  if (cmd) return cmd.slice(0, 400);
  if (typeof finding.remedy !== 'string') return undefined;
  return finding.remedy.split(/(?<=[.;])\s/)[0]!.slice(0, 300);
}

/** The Service's name, the kind and a time bucket: the same change seen by two replicas is one name. */
function eventName(event: LoopEvent, nowMs: number, bucketMs: number): string {
  const h = createHash('sha256')
    .update(`${event.namespace}/${event.service}/${event.reason}/${Math.floor(nowMs / bucketMs)}`)
    .digest('hex')
    .slice(0, 16);
  return `${event.service.slice(0, 200)}.clbprobe-${h}`;
}

/** Creates core/v1 Events through `target` (the relay's service account: create on events). */
export function eventCreator(target: ApiTarget, instance: string): EventRecorderOptions['create'] {
  return async (loop, name) => {
    const at = new Date().toISOString();
    const event = {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { name, namespace: loop.namespace },
      involvedObject: { apiVersion: 'v1', kind: 'Service', namespace: loop.namespace, name: loop.service },
      type: loop.type,
      reason: loop.reason,
      message: loop.message,
      source: { component: COMPONENT },
      reportingComponent: COMPONENT,
      reportingInstance: instance.slice(0, 128),
      firstTimestamp: at,
      lastTimestamp: at,
      count: 1,
    };
    const path = `/api/v1/namespaces/${encodeURIComponent(loop.namespace)}/events`;
    const reply = await postJson(target, path, event, { timeoutMs: 10_000, maxBytes: 4096, overflow: 'cut' });
    if (reply.status === 201 || reply.status === 200) return 'created';
    if (reply.status === 409) return 'exists';
    throw new Error(`create Event in ${loop.namespace}: ${reply.status} ${reply.text.slice(0, 200)}`);
  };
}
