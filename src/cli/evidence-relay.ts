// `clbprobe evidence-relay` (deploy/evidence-relay.yaml): no capabilities, no host network; /evidence, /status and
// /healthz under the agent's connection limits, so idle sockets cannot lock on-call out.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Command } from 'commander';
import type { AuthDecision, AuthnResult } from '../agent/kube-authorizer.js';
import { errText } from '../errors.js';
import { DEFAULT_SERVER_LIMITS, limitConnections, parseListen } from '../http-limits.js';
import { createLogger } from '../log.js';
import { failing, intFlag, namespacedFlag, UserError } from './errors.js';
import { AGENT_POD_OPTIONS, addOptions, type OptionRow } from './options.js';

interface RelayFlags {
  listen: string;
  kubeconfig?: string;
  agentNamespace: string;
  agentSelector: string;
  container: string;
  agentPort: string;
  concurrency: string;
  maxRequests: string;
  maxRequestsPerCaller: string;
  statusTimeout: string;
  recordEvents: 'on' | 'off';
  eventsInterval: string;
  serviceAccount: string;
  logLevel: string;
}

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/** The relay's HTTP server: /evidence, /status (when given) and /healthz, with the connection limits. */
export function relayServer(route: Handler, status?: Handler): Server {
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/evidence') route(req, res);
    else if (req.method === 'GET' && path === '/status' && status) status(req, res);
    else if (req.method === 'GET' && path === '/healthz') res.writeHead(200).end('ok\n');
    else res.writeHead(404).end(`try /evidence${status ? ', /status' : ''} or /healthz\n`);
  });
  limitConnections(server, DEFAULT_SERVER_LIMITS);
  // A watch's answer may be quiet for its whole hour; limitConnections' watchdog still drops a reader taking nothing.
  server.timeout = 0;
  return server;
}

async function run(flags: RelayFlags): Promise<void> {
  const { loadApiTarget } = await import('../cluster/kube-config.js');
  const { KubeApi } = await import('../cluster/kube-api.js');
  const { AccessReviewClient } = await import('../cluster/access-review.js');
  const { KubeAuthorizer, ReviewRateLimiter } = await import('../agent/kube-authorizer.js');
  const { relayRoute } = await import('../remote/relay.js');
  const { statusRoute } = await import('../remote/status.js');
  const { NodeTokens, tokenRequester } = await import('../remote/node-tokens.js');
  const { readAgentPods, sharedInFlight } = await import('../remote/agent-pods.js');
  const log = createLogger(flags.logLevel);
  const listen = parseListen(flags.listen);
  let target: ReturnType<typeof loadApiTarget>;
  try {
    target = loadApiTarget(flags.kubeconfig);
  } catch (e) {
    throw new UserError(errText(e));
  }
  const sa = namespacedFlag(flags.serviceAccount, '--service-account');
  const api = new KubeApi(target);
  // On-call callers all arrive from the API server's address: a wider per-source rate than an agent's.
  const limiter = new ReviewRateLimiter({ perSecond: 5, burst: 20 }, { perSecond: 20, burst: 50 });
  const authz = new KubeAuthorizer(new AccessReviewClient(target), { limiter });
  const nodeTokens = new NodeTokens(tokenRequester(target, sa));
  // What the routes and the Event recorder ask the agents with: the pods, their port, and the bounds.
  const agents = {
    listPods: sharedInFlight(() => readAgentPods(api, flags.agentNamespace, flags.agentSelector, flags.container)),
    container: flags.container,
    agentPort: intFlag(flags.agentPort, '--agent-port', 65535),
    concurrency: intFlag(flags.concurrency, '--concurrency', 100),
    maxRequests: intFlag(flags.maxRequests, '--max-requests', 1000),
    maxRequestsPerCaller: intFlag(flags.maxRequestsPerCaller, '--max-requests-per-caller', 1000),
    nodeToken: (node: string) => nodeTokens.forNode(node),
    agentTimeoutMs: intFlag(flags.statusTimeout, '--status-timeout', 300) * 1000,
    maxAnswerBytes: 16 << 20,
  };
  const logged = <D extends AuthDecision | AuthnResult>(d: D, msg: string, attrs?: object): D => {
    log.info({ user: d.ok ? d.user.username : undefined, status: d.ok ? 200 : d.status, attrs }, msg);
    return d;
  };
  const route = relayRoute({
    check: async (authorization, attrs, source) =>
      logged(await authz.check(authorization, attrs, source), 'evidence request', attrs),
    ...agents,
  });
  const status = statusRoute({
    authenticate: async (authorization, source) =>
      logged(await authz.authenticate(authorization, source), 'status request'),
    ...agents,
  });
  const server = relayServer(route, status);
  const events = new AbortController();
  if (flags.recordEvents === 'on') {
    const { EventRecorder, eventCreator } = await import('../remote/events.js');
    const intervalMs = intFlag(flags.eventsInterval, '--events-interval', 3600) * 1000;
    const recorder = new EventRecorder({
      ...agents,
      create: eventCreator(target, process.env.POD_NAME ?? hostname()),
      quietPeriodMs: 10 * 60_000,
      perMinute: 30,
      burst: 60,
      log,
    });
    // One round at a time: the next starts an interval after the last ends, until the wait is aborted.
    const rounds = async (): Promise<never> => {
      for (;;) {
        await sleep(intervalMs, undefined, { signal: events.signal });
        await recorder.poll().catch((e: unknown) => log.warn({ err: errText(e) }, 'events: round failed'));
      }
    };
    rounds().catch(() => undefined);
  }
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e) => reject(new UserError(`--listen ${flags.listen}: ${e.message}`)));
    server.listen(listen.port, listen.host, () => resolve());
  });
  log.info(
    { listen: flags.listen, agents: `${flags.agentNamespace}/${flags.agentSelector}` },
    'evidence relay listening',
  );
  const stop = () => {
    events.abort();
    server.close(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

const OPTIONS: readonly OptionRow[] = [
  ['--listen <addr>', 'host:port or :port', ':9812'],
  ['--kubeconfig <file>', 'API access (default in a pod: the service account)'],
  ...AGENT_POD_OPTIONS,
  ['--agent-port <port>', "the agents' HTTP port (their --listen)", '9811'],
  ['--concurrency <n>', 'nodes asked at once per request', '20'],
  ['--max-requests <n>', 'requests answered at once (counted once the caller is authenticated)', '16'],
  [
    '--max-requests-per-caller <n>',
    "requests answered at once for one caller (a service account's namespace, else the user)",
    '2',
  ],
  ['--status-timeout <seconds>', 'for /status (clbprobe status): time for one agent to answer with its findings', '10'],
  [
    '--record-events <on|off>',
    'record a Warning Event LoadBalancerLoopback on a Service when a loop starts on ' +
      'some node, and a Normal one when it ends everywhere (needs create on events)',
    'on',
    ['on', 'off'],
  ],
  ['--events-interval <seconds>', 'with --record-events on: time between two rounds of asking every agent', '30'],
  [
    '--service-account <ns/name>',
    "the relay's own service account: it asks the API server for a token " +
      'of it per node (TokenRequest, audience clbprobe-evidence:NODE)',
    'clbprobe/clbprobe-evidence-relay',
  ],
  ['--log-level <level>', 'pino level', 'info'],
];

export function register(program: Command): void {
  const command = program
    .command('evidence-relay')
    .description(
      "Run the evidence relay (deploy/evidence-relay.yaml): on-call engineers reach it through the API server's\n" +
        'service proxy; it checks that their token may get the Service, then asks every agent on their behalf.\n' +
        '/status (clbprobe status) asks every agent for its findings, each showing only Services the caller may get.',
    );
  addOptions(command, OPTIONS).action(failing(run));
}
