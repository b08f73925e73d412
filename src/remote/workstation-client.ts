// The workstation's side of the Kubernetes API (`kubectl clbprobe`: evidence --all-nodes, status):
// the user's kubeconfig as kubectl reads it, through @kubernetes/client-node, which runs its exec
// plugins and auth-providers, follows its proxy-url, and speaks pod exec (pod-exec.ts) and the
// service proxy (relay-client.ts). The commands that run on a node or in a pod use
// src/cluster/kube-config.ts and never load client-node.
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { UserError } from '../user-error.js';
import { type AgentPod, toAgentPod } from './agent-pods.js';

/** KUBECONFIG / ~/.kube/config / in-cluster, as kubectl finds them, or the given file; `context` instead of current-context. */
export function loadWorkstationConfig(file?: string, context?: string): KubeConfig {
  const kc = new KubeConfig();
  try {
    if (file) kc.loadFromFile(file);
    else kc.loadFromDefault();
  } catch (e) {
    throw new UserError(
      `cannot load kubeconfig ${file ?? process.env.KUBECONFIG ?? '~/.kube/config'}: ${e instanceof Error ? e.message : String(e)}`,
    );
  }
  if (context !== undefined) {
    // kubectl's words for a context that is not there.
    if (!kc.getContextObject(context)) throw new UserError(`context "${context}" does not exist`);
    kc.setCurrentContext(context);
  }
  const cluster = kc.getCurrentCluster();
  // loadFromDefault's last resort when it found nothing at all.
  if (!cluster || (!file && cluster.name === 'cluster' && cluster.server === 'http://localhost:8080')) {
    throw new UserError(
      'no kubeconfig: set KUBECONFIG, create ~/.kube/config, run in a pod, or pass --kubeconfig FILE',
    );
  }
  return kc;
}

/** Lists the agent pods; throws an Error that says which RBAC verb or connection is missing. */
export async function listAgentPods(
  kc: KubeConfig,
  namespace: string,
  labelSelector: string,
  container: string,
  timeoutMs: number,
): Promise<AgentPod[]> {
  const api = kc.makeApiClient(CoreV1Api);
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs / 1000} s`)), timeoutMs);
  });
  try {
    const list = await Promise.race([api.listNamespacedPod({ namespace, labelSelector }), timeout]);
    return list.items.map((p) => toAgentPod(p, container));
  } catch (e) {
    throw new Error(
      `cannot list the agent pods (namespace ${namespace}, ${labelSelector}) at ${kc.getCurrentCluster()?.server}: ${listFailure(e, namespace)}`,
    );
  } finally {
    clearTimeout(timer);
  }
}

function listFailure(e: unknown, namespace: string): string {
  const code = (e as { code?: unknown }).code;
  const body = (e as { body?: unknown }).body;
  const msg =
    typeof body === 'string'
      ? statusText(body)
      : body && typeof body === 'object' && 'message' in body
        ? String(body.message)
        : undefined;
  if (code === 403)
    return `403 Forbidden: ${msg ?? ''} (needs RBAC verb "list" on "pods" in namespace ${namespace}; see deploy/oncall-rbac.yaml)`;
  if (code === 401) return `401 Unauthorized: the API server rejected the kubeconfig's credentials`;
  if (typeof code === 'number') return `${code}: ${msg ?? ''}`;
  return e instanceof Error ? e.message : String(e);
}

function statusText(body: string): string {
  try {
    return String((JSON.parse(body) as { message?: unknown }).message ?? body);
  } catch {
    return body.slice(0, 300);
  }
}
