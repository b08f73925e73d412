// The demo's story: a pod's connect to its Service's LB IP loops, diagnose names it, externalTrafficPolicy=Cluster
// fixes it, and the agent's /metrics show it stop; diagnosis and agent are the code `clbprobe` itself runs.
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline/promises';
import { hasActive } from '../detect/index.js';
import { renderText } from '../detect/render.js';
import type { Finding } from '../detect/types.js';
import { runLive, writeHtmlReport } from '../diagnose/run.js';
import type { Sample } from '../export/parse-samples.js';
import { type DemoAgent, startDemoAgent } from './agent.js';
import { createLoopLab, LAB, type LoopLab } from './lab.js';

interface DemoOptions {
  /** Network namespace name prefix; every namespace the demo creates starts with it. */
  prefix: string;
  /** Wait for Enter between steps (only when stdin is a terminal). */
  pause: boolean;
  color: boolean;
  out: NodeJS.WritableStream;
  /** Where the HTML page of the loop's diagnosis goes (kept after the lab is removed). */
  htmlFile: string;
}

/** What the demo saw; `fixed` is the whole point: loop before, none after. */
type DemoOutcome = Awaited<ReturnType<typeof runDemo>>;

const CONNECT_TIMEOUT_MS = 2000;

/** The lab being run, so a signal handler can tear it down. */
let running: { lab?: LoopLab; dir?: string; agent?: DemoAgent } = {};

/** Removes whatever the demo has built so far; safe to call twice and from a signal handler. */
export async function cleanUp(): Promise<void> {
  const { agent } = running;
  running.agent = undefined;
  await agent?.stop().catch(() => undefined);
  running.lab?.destroy();
  if (running.dir) rmSync(running.dir, { recursive: true, force: true });
  running = {};
}

export async function runDemo(opts: DemoOptions) {
  const say = (...lines: string[]): void => void opts.out.write(`${lines.join('\n')}\n`);
  const step = async (n: number, title: string): Promise<void> => {
    if (opts.pause && process.stdin.isTTY) {
      const rl = createInterface({ input: process.stdin, output: process.stdout });
      await rl.question('\n(press Enter to continue) ');
      rl.close();
    }
    say(`\n${opts.color ? `\x1b[1m${n}. ${title}\x1b[0m` : `${n}. ${title}`}`);
  };
  try {
    say('clbprobe demo: a cloud LB that keeps the client address, built from network namespaces on this machine');
    running.dir = mkdtempSync(join(tmpdir(), 'clbprobe-demo-'));
    const lab = await createLoopLab('Local', opts.prefix);
    running.lab = lab;
    say(
      `  LB      ${lab.lb.name}: VIP ${LAB.vip}:${LAB.port} -> ${LAB.node1}:${LAB.nodePort} (node1's NodePort), ` +
        'no SNAT;',
      `          traffic from node1's own address goes to node2 (${LAB.node2}:${LAB.nodePort}) instead: ` +
        'its anti-loopback',
      `  node1   ${lab.node.name}: kube-proxy in IPVS mode as on TKE: ${LAB.vip} is in its KUBE-LOAD-BALANCER ` +
        'ipset but not bound',
      '          on kube-ipvs0, so pod traffic to it leaves the node; ' +
        'Service lab/web: LoadBalancer, externalTrafficPolicy=Local',
      "          (this kernel has no IPVS: one DNAT rule stands in for the NodePort's IPVS virtual server)",
      `  pods    client ${LAB.clientPod} (${lab.pod.name}), server ${LAB.serverPod}:${LAB.serverPort} ` +
        `(${lab.server.name}), both on node1`,
    );

    await step(1, 'Start the clbprobe agent on node1 (what the DaemonSet runs on every node)');
    // The agent's view of the cluster: one file, rewritten when the Service changes (as a watch would see it).
    const clusterFile = join(running.dir, 'cluster.json');
    copyFileSync(lab.writeClusterFile(running.dir), clusterFile);
    const agent = await startDemoAgent(lab, clusterFile);
    running.agent = agent;
    say(
      `  counting LB-path packets with ${agent.counting}; ` +
        'conntrack events, NAT rules and the Service from the cluster file',
      `  metrics: ${agent.metricsUrl}`,
    );
    let last = await agent.scrape();
    say(indent(metricLines(last, last)));

    await step(2, `The client pod connects to the Service's LB IP ${LAB.vip}:${LAB.port} (${CONNECTS} times)`);
    const first = await connectAll(lab);
    const loopSeen = first.every((r) => r === 'timeout');
    say(`  results: ${first.join(', ')}`);
    if (loopSeen) {
      say(
        "  Each SYN left node1 with the pod as source (ETP=Local: no masquerade), the LB sent it back to node1's",
        "  NodePort, node1 DNATed it to the server pod next door, and the server's SYN-ACK went straight to the",
        '  client from the pod IP, not from the VIP: the client drops it and the connect hangs.',
      );
    }
    say(`  The agent's counters (${agent.metricsUrl}):`);
    const looped = await settle(agent, (s) => value(s, 'loop_return') > value(last, 'loop_return'));
    say(indent(metricLines(looped, last)));
    const loopCounted = value(looped, 'loop_return') > value(last, 'loop_return');
    last = looped;

    await step(3, 'clbprobe diagnose on node1 (same code as `clbprobe diagnose --netns NODE1`)');
    const before = await diagnose(lab, running.dir);
    say(indent(renderText(before, { color: opts.color, nodeName: LAB.node1Name })));
    const loopDiagnosed = before.findings.some((f) => f.mechanism === 'L4-loop' && f.severity === 'active');
    writeHtmlReport(opts.htmlFile, before, {
      nodeName: LAB.node1Name,
      generatedAt: new Date().toISOString(),
      source: `demo lab, node1 (${lab.node.name})`,
    });
    for (const w of agent.warnings().filter((l) => l.msg === 'finding raised'))
      say(`  agent log: ${JSON.stringify(w)}`);

    await step(4, 'The fix: externalTrafficPolicy=Cluster on lab/web');
    lab.setEtp('Cluster');
    copyFileSync(lab.writeClusterFile(running.dir), clusterFile);
    say(
      "  node1 now runs kube-proxy's ETP=Cluster rules: pod->LB-IP traffic is masqueraded to the node address",
      `  (KUBE-LOAD-BALANCER -> KUBE-MARK-MASQ: ${LAB.vip} left KUBE-LOAD-BALANCER-LOCAL), ` +
        'so the LB sees node1 as the source',
      "  and sends the connection to another backend. node1's old conntrack entries were flushed.",
    );
    await agent.resync();
    say(
      '  The agent re-read the Service and the NAT rules (in a cluster: the Service watch at once, NAT every',
      '  --resync-interval, 60 s by default).',
    );

    await step(5, `The client pod connects to ${LAB.vip}:${LAB.port} again (${CONNECTS} times)`);
    const second = await connectAll(lab);
    say(`  results: ${second.join(', ')}`);
    if (second.every((r) => r === 'connected node2'))
      say('  The LB sent them to node2 (its other backend), which answered: no loop.');
    const after = await settle(agent, (s) => value(s, 'to_lb') > value(last, 'to_lb') && !activeGauge(s));
    say(
      '  The counters: to_lb keeps rising, loop_return stands still, no active finding:',
      indent(metricLines(after, last)),
    );
    const loopStopped =
      value(after, 'loop_return') === value(last, 'loop_return') && value(after, 'to_lb') > value(last, 'to_lb');

    await step(6, 'clbprobe diagnose on node1 again');
    const diag = await diagnose(lab, running.dir);
    say(indent(renderText(diag, { color: opts.color, nodeName: LAB.node1Name })));
    const fixed = second.every((r) => r.startsWith('connected')) && !hasActive(diag.findings) && !activeGauge(after);

    // counted: the agent's loop_return counter rose while the connects looped and stood still after the fix.
    const outcome = { loopSeen, loopDiagnosed, counted: loopCounted && loopStopped, fixed };
    say(
      '',
      verdict(outcome, diag.findings),
      `The diagnosis of the loop (step 3) as a page, the loop drawn with its conntrack legs: ${opts.htmlFile}`,
    );
    return outcome;
  } finally {
    await cleanUp();
    say('Lab removed (all its network namespaces and processes).');
  }
}

const CONNECTS = 3;

/** CONNECTS connects at once from the client pod; each 'timeout', 'connected NAME' or an errno. */
function connectAll(lab: LoopLab): Promise<string[]> {
  return Promise.all(Array.from({ length: CONNECTS }, () => lab.connect(CONNECT_TIMEOUT_MS)));
}

/** Scrapes until `done` holds (the counters are read at scrape time, conntrack events take a moment) or 3 s pass. */
async function settle(agent: DemoAgent, done: (s: Sample[]) => boolean): Promise<Sample[]> {
  const until = Date.now() + 3000;
  for (;;) {
    const s = await agent.scrape();
    if (done(s) || Date.now() > until) return s;
    await new Promise((r) => setTimeout(r, 200));
  }
}

const isWeb = (sample: Sample): boolean => sample.labels.namespace === 'lab' && sample.labels.service === 'web';

function value(samples: Sample[], kind: string): number {
  return (
    samples.find((x) => x.name === 'clbprobe_lb_path_packets_total' && isWeb(x) && x.labels.kind === kind)?.value ?? 0
  );
}

function activeGauge(samples: Sample[]): boolean {
  return samples.some(
    (x) => x.name === 'clbprobe_findings_active' && isWeb(x) && x.labels.severity === 'active' && x.value > 0,
  );
}

const SHOWN = [
  'clbprobe_lb_path_packets_total',
  'clbprobe_conntrack_flows_total',
  'clbprobe_conntrack_entries',
  'clbprobe_findings_active',
];

/** lab/web's series, counters with their rise since `prev`. */
function metricLines(now: Sample[], prev: Sample[]): string {
  const series = (sample: Sample, hidden: string[] = []): string =>
    `${sample.name}{${Object.entries(sample.labels)
      .filter(([k]) => !hidden.includes(k))
      .map(([k, v]) => `${k}="${v}"`)
      .join(',')}}`;
  const was = new Map(prev.map((x) => [series(x), x.value]));
  const lines = now
    .filter((x) => isWeb(x) && SHOWN.includes(x.name))
    .sort((a, b) => SHOWN.indexOf(a.name) - SHOWN.indexOf(b.name))
    .map((x) => {
      const rise = x.name.endsWith('_total') ? x.value - (was.get(series(x)) ?? 0) : 0;
      const shown = series(x, ['namespace', 'service', 'protocol']).padEnd(72);
      return `${shown} ${String(x.value).padStart(4)}${rise ? `  (+${rise})` : ''}`;
    });
  return lines.length
    ? `lab/web:\n${lines.map((l) => `  ${l}`).join('\n')}`
    : 'lab/web: no series yet (a node exports a Service port once ' +
        'it counts traffic, a conntrack entry or a finding for it)';
}

async function diagnose(lab: LoopLab, dir: string) {
  return (await runLive({ clusterFile: lab.writeClusterFile(dir), netns: lab.node.path }, LAB.node1Name)).result;
}

function indent(text: string): string {
  return text.replace(/\n$/, '').replace(/^(?=.)/gm, '  ');
}

function verdict(outcome: DemoOutcome, after: Finding[]): string {
  const active = after.filter((f) => f.severity === 'active').map((f) => f.mechanism);
  const why = [
    outcome.loopSeen ? '' : 'the first connects did not loop',
    outcome.loopDiagnosed ? '' : 'diagnose did not report an active L4-loop',
    outcome.counted ? '' : "the agent's loop_return counter did not rise with the loop and stop after the fix",
    outcome.fixed ? '' : `after the fix: ${active.join(', ') || 'the connect still failed'}`,
  ].filter(Boolean);
  if (why.length) return `Result: the demo did not go as expected: ${why.join('; ')}.`;
  return (
    'Result: loop detected (L4-loop, active; loop_return counted) and ' +
    'fixed (connects work, loop_return stopped, no active finding).'
  );
}
