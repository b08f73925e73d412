// A kubeconfig with one cluster (c), one user (u) and the context (x) that joins them, for the client's tests.

/** The YAML text; `cluster` and `user` are the lines under `cluster:` and `user:` (an empty user is `{}`). */
export function kubeconfigText(cluster: readonly string[], user: readonly string[]): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: c',
    '  cluster:',
    ...cluster.map((l) => `    ${l}`),
    'users:',
    '- name: u',
    '  user:',
    ...(user.length ? user.map((l) => `    ${l}`) : ['    {}']),
    'contexts:',
    '- name: x',
    '  context:',
    '    cluster: c',
    '    user: u',
    'current-context: x',
    '',
  ].join('\n');
}
