// `clbprobe evidence-relay`: the evidence relay's process (deploy/evidence-relay.yaml), no
// capabilities, no host network. Serves GET /evidence (src/remote/relay.ts) and /healthz.
import { createServer } from 'node:http';
import { Command, Option } from 'commander';
import type { V1Pod } from '@kubernetes/client-node';
import { createLogger } from '../log.js';
import { parseListen } from '../export/server.js';
import { UserError, fail } from './errors.js';
import { AGENT_DEFAULTS } from './evidence.js';

interface RelayFlags {
  listen: string;
  kubeconfig?: string;
  agentNamespace: string;
  agentSelector: string;
  container: string;
  agentPort: string;
  concurrency: string;
  maxRequests: string;
  logLevel: string;
}

const int = (text: string, flag: string, max: number): number => {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1 || n > max) throw new UserError(`${flag}: expected 1-${max}, not ${JSON.stringify(text)}`);
  return n;
};

async function run(f: RelayFlags): Promise<void> {
  const { loadApiTarget } = await import('../cluster/kube-config.js');
  const { KubeApi } = await import('../cluster/kube-api.js');
  const { AccessReviewClient } = await import('../cluster/access-review.js');
  const { KubeAuthorizer } = await import('../agent/kube-authorizer.js');
  const { relayRoute } = await import('../remote/relay.js');
  const { toAgentPod } = await import('../remote/agent-pods.js');
  const log = createLogger(f.logLevel);
  let listen: { host?: string; port: number };
  let target;
  try {
    listen = parseListen(f.listen);
    target = loadApiTarget(f.kubeconfig);
  } catch (e) {
    throw new UserError(e instanceof Error ? e.message : String(e));
  }
  const api = new KubeApi(target);
  const authz = new KubeAuthorizer(new AccessReviewClient(target));
  const pods = `/api/v1/namespaces/${encodeURIComponent(f.agentNamespace)}/pods`;
  const route = relayRoute({
    check: async (authorization, attrs) => {
      const d = await authz.check(authorization, attrs);
      log.info({ user: d.ok ? d.user.username : undefined, status: d.ok ? 200 : d.status, attrs }, 'evidence request');
      return d;
    },
    listPods: async () => (await api.listPage(pods, { labelSelector: f.agentSelector })).items.map((p) => toAgentPod(p as V1Pod, f.container)),
    container: f.container,
    agentPort: int(f.agentPort, '--agent-port', 65535),
    concurrency: int(f.concurrency, '--concurrency', 100),
    maxRequests: int(f.maxRequests, '--max-requests', 1000),
  });
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/evidence') route(req, res);
    else if (req.method === 'GET' && path === '/healthz') res.writeHead(200).end('ok\n');
    else res.writeHead(404).end('try /evidence or /healthz\n');
  });
  // Streams last as long as a watch (at most an hour); only the request head is timed.
  server.headersTimeout = 10_000;
  server.requestTimeout = 0;
  server.maxConnections = 256;
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e) => reject(new UserError(`--listen ${f.listen}: ${e.message}`)));
    server.listen(listen.port, listen.host, () => resolve());
  });
  log.info({ listen: f.listen, agents: `${f.agentNamespace}/${f.agentSelector}` }, 'evidence relay listening');
  const stop = () => server.close(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

export function register(program: Command): void {
  program
    .command('evidence-relay')
    .description(
      'Run the evidence relay (deploy/evidence-relay.yaml): on-call engineers reach it through the API server\'s\n' +
        'service proxy; it checks that their token may get the Service, then asks every agent with that token.',
    )
    .addOption(new Option('--listen <addr>', 'host:port or :port').default(':9812'))
    .option('--kubeconfig <file>', 'API access (default in a pod: the service account)')
    .option('--agent-namespace <ns>', "the agent pods' namespace", AGENT_DEFAULTS.namespace)
    .option('--agent-selector <labels>', 'label selector of the agent pods', AGENT_DEFAULTS.selector)
    .option('--container <name>', 'the agent container in those pods', AGENT_DEFAULTS.container)
    .option('--agent-port <port>', "the agents' HTTP port (their --listen)", '9811')
    .option('--concurrency <n>', 'nodes asked at once per request', '20')
    .option('--max-requests <n>', 'requests answered at once', '16')
    .option('--log-level <level>', 'pino level', 'info')
    .action(async (f: RelayFlags) => {
      try {
        await run(f);
      } catch (e) {
        fail(e);
      }
    });
}
