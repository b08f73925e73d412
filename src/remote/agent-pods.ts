// The agent pods to ask, one per node: read from a Pod as the API lists it, then planned (which pod answers
// for which node, which nodes cannot answer and why). The plan is pure so it is tested on its own.
import { each, fields, idValue, SkippedObject, unit, VALUE } from '../cluster/json-reduce.js';
import type { KubeApi } from '../cluster/kube-api.js';
import { byText } from '../compare.js';

export interface PodFields {
  metadata?: { name?: string; deletionTimestamp?: unknown };
  spec?: { nodeName?: string; containers?: { name: string }[] };
  status?: {
    phase?: string;
    podIP?: string;
    containerStatuses?: { name: string; ready?: boolean; state?: { waiting?: { reason?: string } } }[];
  };
}

export type AgentPod = ReturnType<typeof toAgentPod>;

/** The fields toAgentPod reads, as a json-reduce shape: a listing keeps these of each pod, not its whole spec. */
export const AGENT_POD_SHAPE = unit(
  'Pod',
  64 << 10,
  fields({
    metadata: fields({ name: idValue('name'), deletionTimestamp: VALUE }),
    spec: fields({ nodeName: VALUE, containers: each(fields({ name: VALUE })) }),
    status: fields({
      phase: VALUE,
      podIP: VALUE,
      containerStatuses: each(
        fields({ name: VALUE, ready: VALUE, state: fields({ waiting: fields({ reason: VALUE }) }) }),
      ),
    }),
  }),
);

/** Lists the agent pods, each reduced to AGENT_POD_SHAPE as it arrives. */
export async function readAgentPods(
  api: Pick<KubeApi, 'listPage'>,
  namespace: string,
  labelSelector: string,
  container: string,
  timeoutMs?: number,
): Promise<AgentPod[]> {
  const path = agentPodsPath(namespace);
  const page = await api.listPage(path, { labelSelector }, timeoutMs, AGENT_POD_SHAPE);
  return page.items.map((p) => (p instanceof SkippedObject ? skippedPod(p) : toAgentPod(p as PodFields, container)));
}

export const agentPodsPath = (namespace: string): string => `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods`;

/** A pod whose read fields are past the shape's caps: not asked, and named with why among the unreachable. */
const skippedPod = (skipped: SkippedObject): AgentPod => ({
  ...toAgentPod({ metadata: { name: skipped.name ?? '(name not read)' } }, ''),
  waiting: `not read: ${skipped.reason}`,
});

/** Callers arriving while a read is under way share it, so concurrent requests hold one answer between them. */
export function sharedInFlight<T>(read: () => Promise<T>): () => Promise<T> {
  let pending: Promise<T> | undefined;
  return () => {
    pending ??= read().finally(() => {
      pending = undefined;
    });
    return pending;
  };
}

/** Appended to a node's failure when its agent container is not ready (its /readyz). */
export const notReadyNote = (pod: AgentPod): string => (pod.ready ? '' : ' (the agent container is not ready)');

export function toAgentPod(pod: PodFields, container: string) {
  const cs = pod.status?.containerStatuses?.find((c) => c.name === container);
  const waiting = cs?.state?.waiting?.reason;
  return {
    name: pod.metadata?.name ?? '',
    /** spec.nodeName; '' while unscheduled. */
    node: pod.spec?.nodeName ?? '',
    phase: pod.status?.phase ?? 'Unknown',
    /** The agent container's readiness (its /readyz). */
    ready: cs?.ready === true,
    /** Why the agent container is not running, e.g. CrashLoopBackOff. */
    ...(waiting ? { waiting } : {}),
    containers: (pod.spec?.containers ?? []).map((c) => c.name),
    deleting: Boolean(pod.metadata?.deletionTimestamp),
    /** status.podIP (the node's address: the agent runs in the host network); '' until known. */
    ip: pod.status?.podIP ?? '',
  };
}

export interface Unreachable {
  node: string;
  pod?: string;
  reason: string;
}

/** One Running pod per node, preferring ready and not deleting (rolling updates); `only` also reports podless nodes. */
export function planNodes(
  pods: AgentPod[],
  container: string,
  only?: string[],
): { ask: AgentPod[]; unreachable: Unreachable[] } {
  const byNode = new Map<string, AgentPod[]>();
  for (const p of pods) {
    if (only && !only.includes(p.node)) continue;
    byNode.set(p.node, [...(byNode.get(p.node) ?? []), p]);
  }
  const rank = (pod: AgentPod) => (pod.deleting ? 2 : 0) + (pod.ready ? 0 : 1);
  const ask: AgentPod[] = [];
  const unreachable: Unreachable[] = [];
  for (const [node, list] of [...byNode].sort(([a], [b]) => byText(a, b))) {
    const running = list
      .filter((p) => p.phase === 'Running')
      .sort((a, b) => rank(a) - rank(b) || byText(a.name, b.name));
    const best = running[0];
    if (best && !best.containers.includes(container)) {
      unreachable.push({
        node,
        pod: best.name,
        reason: `pod has no container ${JSON.stringify(container)} (it has ${best.containers.join(', ')}; --container)`,
      });
    } else if (best) ask.push(best);
    else {
      for (const p of list) {
        const why = `agent pod not running: phase ${p.phase}${p.waiting ? `, ${p.waiting}` : ''}`;
        unreachable.push({ node: node || '(unscheduled)', pod: p.name, reason: why });
      }
    }
  }
  for (const node of only ?? []) if (!byNode.has(node)) unreachable.push({ node, reason: 'no agent pod on this node' });
  return { ask, unreachable };
}
