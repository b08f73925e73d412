// The workstation side of the API (`kubectl clbprobe`): the user's kubeconfig as kubectl finds it, and agent pods.
import { ApiError, KubeApi } from '../cluster/kube-api.js';
import { type ApiTarget, KubeConfigError, loadWorkstationTarget } from '../cluster/kube-config.js';
import { errText } from '../errors.js';
import { UserError } from '../user-error.js';
import { type AgentPod, agentPodsPath, readAgentPods } from './agent-pods.js';

/** --kubeconfig FILE, else KUBECONFIG / ~/.kube/config / in-cluster as kubectl finds them; `context` if given. */
export function loadWorkstationConfig(file?: string, context?: string): ApiTarget {
  try {
    return loadWorkstationTarget(file, context);
  } catch (e) {
    if (e instanceof KubeConfigError) throw new UserError(e.message);
    throw e;
  }
}

/** Lists the agent pods; throws a UserError that says which RBAC verb or connection is missing. */
export async function listAgentPods(
  target: ApiTarget,
  namespace: string,
  labelSelector: string,
  container: string,
  timeoutMs: number,
): Promise<AgentPod[]> {
  const path = agentPodsPath(namespace);
  try {
    return await readAgentPods(new KubeApi(target), namespace, labelSelector, container, timeoutMs);
  } catch (e) {
    throw new UserError(
      `cannot list the agent pods (namespace ${namespace}, ${labelSelector}) ` +
        `at ${target.server}: ${listFailure(e, path, namespace)}`,
    );
  }
}

function listFailure(e: unknown, path: string, namespace: string): string {
  if (!(e instanceof ApiError)) return errText(e);
  if (e.statusCode === 401) return "401 Unauthorized: the API server rejected the kubeconfig's credentials";
  const why = e.message.replace(`GET ${path}: `, '');
  if (e.statusCode === 403)
    return `${why} (needs RBAC verb "list" on "pods" in namespace ${namespace}; see deploy/oncall-rbac.yaml)`;
  return why;
}
