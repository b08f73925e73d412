// `clbprobe agent`: the DaemonSet process. Serves /metrics, /healthz and /readyz on --listen and evidence on a Unix
// socket; SIGTERM detaches the counters and closes every socket within 5 s.
import type { Server } from 'node:http';
import { hostname } from 'node:os';
import type { Command, Option } from 'commander';
import type { AgentOptions } from '../agent/agent.js';
import { DEFAULT_RELAY_USER, type EvidenceAccess, evidenceRoute } from '../agent/evidence-http.js';
import { findingsRoute } from '../agent/findings-http.js';
import type { KubeAuthorizer } from '../agent/kube-authorizer.js';
import { createAgentRegistry } from '../agent/metrics/list.js';
import type { CounterOptions } from '../capture/counter-types.js';
import type { CaptureMode } from '../capture/targets.js';
import { errText } from '../errors.js';
import { createMetricsServer, type MetricsServerOptions } from '../export/server.js';
import { parseListen } from '../http-limits.js';
import { createLogger, type Logger } from '../log.js';
import { netnsPath } from '../netns-path.js';
import { failing, intFlag, UserError } from './errors.js';
import { type OptionRow, optionOf } from './options.js';

export const DEFAULT_EVIDENCE_SOCKET = '/run/clbprobe/evidence.sock';
const VERSION = process.env.npm_package_version ?? '0.1.0';

type TcAttach = NonNullable<CounterOptions['attach']>;
const TC_ATTACH_MODES: readonly TcAttach[] = ['auto', 'tcx', 'tc'];

export interface AgentFlags {
  nodeName?: string;
  listen: string;
  interface?: string;
  capture: CaptureMode;
  tcAttach: TcAttach;
  kubeconfig?: string;
  clusterFile?: string;
  logLevel: string;
  resyncInterval: string;
  conntrackResyncInterval: string;
  conntrackFilter: 'kernel' | 'user';
  evidenceSocket: string;
  maxServicePorts: string;
  seriesIdleTimeout: string;
  metricsAuth: 'none' | 'kubernetes';
  netns?: string;
  resolvConf: string;
  dnsMaxNames: string;
  releaseStartupPages: boolean;
  evidenceRelayUser: string;
}

const SECONDS_PER_UNIT: Record<string, number> = { s: 1, m: 60, h: 3600 };

/** "60", "60s", "5m", "1h" → seconds. */
export function parseSeconds(text: string, flag: string): number {
  const m = /^(\d+)(s|m|h)?$/.exec(text);
  if (!m || Number(m[1]) === 0)
    throw new UserError(`${flag}: expected a duration like 60s, 5m or 1h, not ${JSON.stringify(text)}`);
  return Number(m[1]) * SECONDS_PER_UNIT[m[2] ?? 's']!;
}

export function agentOptions(flags: AgentFlags, log: Logger): AgentOptions {
  return {
    nodeName: flags.nodeName ?? hostname(),
    version: VERSION,
    log,
    ...(flags.netns ? { netns: netnsPath(flags.netns) } : {}),
    ...(flags.interface ? { ifname: flags.interface } : {}),
    capture: flags.capture,
    tcAttach: flags.tcAttach,
    ...(flags.clusterFile ? { clusterFile: flags.clusterFile } : {}),
    ...(flags.kubeconfig ? { kubeconfig: flags.kubeconfig } : {}),
    clusterApi: Boolean(flags.kubeconfig || process.env.KUBERNETES_SERVICE_HOST),
    resyncIntervalS: parseSeconds(flags.resyncInterval, '--resync-interval'),
    conntrackResyncIntervalS: parseSeconds(flags.conntrackResyncInterval, '--conntrack-resync-interval'),
    conntrackKernelFilter: flags.conntrackFilter === 'kernel',
    dnsLookup: { resolvConf: flags.resolvConf, maxNames: intFlag(flags.dnsMaxNames, '--dns-max-names') },
  };
}

async function run(flags: AgentFlags): Promise<void> {
  // Loaded here, not at start-up: the other subcommands do not need the agent's modules.
  const { Agent } = await import('../agent/agent.js');
  const { EvidenceAnswers, startEvidenceServer } = await import('../agent/evidence-server.js');
  const log = createLogger(flags.logLevel);
  const releaseStartupPages = flags.releaseStartupPages ? await startupPagesReleaser(log) : () => undefined;
  const listen = parseListen(flags.listen);
  const options = agentOptions(flags, log);
  const agent = new Agent({ ...options, onStartupPhase: releaseStartupPages });
  const registry = createAgentRegistry(() => agent.metricsState(), {
    maxServicePorts: intFlag(flags.maxServicePorts, '--max-service-ports'),
    idleMs: parseSeconds(flags.seriesIdleTimeout, '--series-idle-timeout') * 1000,
    processMetrics: true,
  });
  const { nodeName } = options;
  const { authz, evidenceAuthz, why } = await apiAuthorizer(flags.kubeconfig, nodeName);
  if (flags.metricsAuth === 'kubernetes' && !authz)
    throw new UserError(`--metrics-auth kubernetes checks tokens with the API server: ${why}`);
  const noApi = { ok: false as const, status: 503 as const, message: `no API server to check the token: ${why}` };
  const logged = <D extends { ok: boolean; status?: number; message?: string }>(d: D): D => {
    if (!d.ok && d.status === 503) log.warn({ err: d.message }, 'token check failed');
    return d;
  };
  const metrics = { nonResource: { path: '/metrics', verb: 'get' } };
  const authorize: MetricsServerOptions['authorize'] =
    flags.metricsAuth === 'kubernetes' && authz
      ? async (req) => logged(await authz.check(req.headers.authorization, metrics, req.socket.remoteAddress))
      : undefined;
  // /evidence takes only tokens for this node's audience (the evidence relay's), whatever --metrics-auth.
  const evidenceAccess: EvidenceAccess = {
    authenticate: async (authorization, source) =>
      logged(evidenceAuthz ? await evidenceAuthz.authenticate(authorization, source) : noApi),
    authorize: async (user, attrs, by) =>
      logged(evidenceAuthz ? await evidenceAuthz.authorize(user, attrs, by) : noApi),
    relayUser: flags.evidenceRelayUser,
  };
  // /evidence and the evidence socket share one EvidenceAnswers, made once the agent has started.
  let evidenceAnswers: InstanceType<typeof EvidenceAnswers> | undefined;
  // Serve /healthz at once; /readyz turns 200 after the first sync.
  const http: Server = createMetricsServer({
    registry,
    ready: () => agent.ready,
    ...(authorize ? { authorize } : {}),
    routes: {
      '/evidence': evidenceRoute(evidenceAccess, () => evidenceAnswers),
      '/findings': findingsRoute(evidenceAccess, () => ({
        ready: agent.ready,
        nodeName,
        version: VERSION,
        findings: agent.metricsState().findings,
      })),
    },
  });
  await new Promise<void>((resolve, reject) => {
    http.once('error', (e) => reject(new UserError(`--listen ${flags.listen}: ${e.message}`)));
    http.listen(listen.port, listen.host, () => resolve());
  });
  log.info({ listen: flags.listen, node: flags.nodeName, auth: flags.metricsAuth }, 'metrics server listening');
  releaseStartupPages('modules loaded');
  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'stopping');
    setTimeout(() => process.exit(0), 4500).unref();
    http.closeAllConnections();
    http.close();
    evidence?.close();
    agent.stop().finally(() => process.exit(0));
  };
  let evidence: import('node:net').Server | undefined;
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  await agent.start();
  evidenceAnswers = new EvidenceAnswers({
    table: () => agent.table,
    find: (ns, name, port) => agent.find(ns, name, port),
    nodeName,
    ...(agent.ifname ? { ifname: agent.ifname } : {}),
  });
  evidence = await startEvidenceServer(flags.evidenceSocket, evidenceAnswers);
  log.info({ socket: flags.evidenceSocket }, 'evidence socket listening');
}

/** Start-up's pages back to the kernel after each one-off phase whose code later cycles do not run. */
async function startupPagesReleaser(log: Logger): Promise<(phase: string) => void> {
  const { processStartupPagesIo, releaseStartupPages } = await import('../agent/startup-pages.js');
  const io = processStartupPagesIo();
  let unsupported = false;
  return (phase) => {
    if (unsupported) return;
    const r = releaseStartupPages(io);
    const mb = (kib: number | undefined) => (kib === undefined ? undefined : Math.round(kib / 102.4) / 10);
    const fields = {
      phase,
      mappings: r.mappings,
      rssFileMBBefore: mb(r.rssFileKiBBefore),
      rssFileMBAfter: mb(r.rssFileKiBAfter),
    };
    // An old kernel is no fault: said once, and not tried again.
    if (r.unsupported) log.info({ phase, reason: r.errors[0] }, 'start-up pages: not released');
    else if (r.errors.length) log.warn({ ...fields, errors: r.errors }, 'start-up pages: not all released');
    else log.info(fields, 'start-up pages released');
    unsupported = r.unsupported === true;
  };
}

/**
 * Token checks by the API server with the agent's own credentials: /metrics' with the API server's audience,
 * /evidence's with this node's, under one rate limit of reviews for strangers; without an API, the reason.
 */
async function apiAuthorizer(
  kubeconfig: string | undefined,
  nodeName: string,
): Promise<{ authz?: KubeAuthorizer; evidenceAuthz?: KubeAuthorizer; why?: string }> {
  const { loadApiTarget } = await import('../cluster/kube-config.js');
  const { AccessReviewClient } = await import('../cluster/access-review.js');
  const { KubeAuthorizer, ReviewRateLimiter } = await import('../agent/kube-authorizer.js');
  const { evidenceAudience } = await import('../agent/evidence-http.js');
  try {
    const reviews = new AccessReviewClient(loadApiTarget(kubeconfig));
    const limiter = new ReviewRateLimiter();
    return {
      authz: new KubeAuthorizer(reviews, { limiter }),
      evidenceAuthz: new KubeAuthorizer(reviews, { limiter, audiences: [evidenceAudience(nodeName)] }),
    };
  } catch (e) {
    return { why: errText(e) };
  }
}

const OPTIONS: readonly OptionRow[] = [
  ['--node-name <name>', 'this node in the cluster view (default: hostname)'],
  ['--listen <addr>', 'metrics address, host:port or :port', ':9811'],
  ['--interface <ifname>', 'uplink to count on (default: the default-route interface)'],
  ['--capture <backend>', 'packet counters', 'auto', ['ebpf', 'pcap', 'off', 'auto']],
  [
    '--tc-attach <mode>',
    'how the eBPF counters hook the uplink: auto = TCX where the kernel has it (6.6+), else legacy tc cls_bpf ' +
      'filters; tcx = TCX only, no cls_bpf fallback; tc forces the cls_bpf path that pre-6.6 kernels use ' +
      '(e.g. to test that the preStop clean-up removes its filters)',
    'auto',
    TC_ATTACH_MODES,
  ],
  ['--kubeconfig <file>', 'watch the API with this kubeconfig (default in a pod: service account)'],
  ['--cluster-file <file>', 'read Services/EndpointSlices/Nodes from a kubectl -o json file instead of the API'],
  ['--log-level <level>', 'pino level', 'info'],
  ['--resync-interval <dur>', 'full re-read of NAT, IPVS, addresses and the cluster file', '60s'],
  [
    '--conntrack-resync-interval <dur>',
    'full conntrack re-dump; events and a re-dump after any event overflow keep the table exact meanwhile ' +
      '(a dump costs ~1 s CPU per 300k entries)',
    '10m',
  ],
  [
    '--conntrack-filter <where>',
    'where conntrack events that touch no LB Service are dropped: kernel (an eBPF socket filter; falls back ' +
      'to user when it cannot load) or user',
    'kernel',
    ['kernel', 'user'],
  ],
  ['--evidence-socket <path>', 'Unix socket for `clbprobe evidence`', DEFAULT_EVIDENCE_SOCKET],
  [
    '--max-service-ports <n>',
    'cap on the Service ports with per-Service series (those with findings first); the rest are counted in ' +
      'clbprobe_series_dropped_total',
    '300',
  ],
  [
    '--series-idle-timeout <dur>',
    'a Service port gets series once this node counts packets, conntrack entries or flows towards it, or has ' +
      'a finding; they go after this long with nothing new',
    '1h',
  ],
  [
    '--metrics-auth <mode>',
    'who may read /metrics: none, or kubernetes (a bearer token the API server accepts, whose user may "get" ' +
      'the non-resource URL /metrics; /healthz and /readyz stay open)',
    'none',
    ['none', 'kubernetes'],
  ],
  [
    '--resolv-conf <file>',
    'resolver for hostname-only LB names (AWS NLB): in the DaemonSet (dnsPolicy ClusterFirstWithHostNet) ' +
      "/etc/resolv.conf is the cluster DNS this node's pods use; with --netns NAME, " +
      '/etc/netns/NAME/resolv.conf as `ip netns exec` binds it',
    '/etc/resolv.conf',
  ],
  ['--dns-max-names <n>', 'hostname-only LB names looked up at most (the rest are reported as not looked up)', '256'],
  [
    '--no-release-startup-pages',
    'keep the pages of node and its libraries that only start-up read; by default they go back to the kernel ' +
      '(madvise MADV_PAGEOUT) once the modules are loaded, when the sources are read and after the conntrack ' +
      'dump, and what runs later is read back in',
  ],
  [
    '--evidence-relay-user <user>',
    "the evidence relay's user: the only caller of /evidence that may name the on-call user it asks for",
    DEFAULT_RELAY_USER,
  ],
  ['--netns <name>', 'read the datapath of network namespace NAME or a path (tests); needs --interface for counters'],
];

/** The variable that sets an option, as the DaemonSet does: CLBPROBE_ and its name, but for these. */
const ENV_NAMES = new Map([
  ['--node-name', 'NODE_NAME'],
  ['--kubeconfig', 'KUBECONFIG'],
  ['--no-release-startup-pages', undefined],
  ['--netns', undefined],
]);

function agentOption(row: OptionRow): Option {
  const name = row[0].split(' ')[0]!;
  const env = ENV_NAMES.has(name) ? ENV_NAMES.get(name) : `CLBPROBE_${name.slice(2).replace(/-/g, '_').toUpperCase()}`;
  return env ? optionOf(row).env(env) : optionOf(row);
}

export function register(program: Command): void {
  const command = program
    .command('agent')
    .description(
      'Run the node agent: per-Service Prometheus metrics of LB loopback (counters, conntrack, findings),\n' +
        '/healthz and /readyz, and live evidence on a Unix socket for `clbprobe evidence`. Needs root or\n' +
        'CAP_NET_ADMIN + CAP_BPF (+ CAP_NET_RAW for the pcap fallback).',
    );
  for (const o of OPTIONS) command.addOption(agentOption(o));
  command
    .addHelpText(
      'after',
      [
        '',
        'Examples:',
        '  NODE_NAME=node-1 clbprobe agent                       in a DaemonSet pod (API via service account)',
        '  clbprobe agent --cluster-file cluster.json --listen 127.0.0.1:9811 --capture pcap',
        '  clbprobe agent --metrics-auth kubernetes --listen "$HOST_IP:9811"   ' +
          '/metrics for RBAC-allowed tokens, on the node IP only',
        '  curl -s localhost:9811/metrics | grep clbprobe_lb_path_packets_total',
      ].join('\n'),
    )
    .action(failing(run));
}
