// The demo's story, step by step: a pod whose connect to its Service's LB IP
// loops (the LB does not SNAT and sends it back to the client's own node),
// the diagnosis that names the mechanism with its evidence and fix, the fix
// applied (externalTrafficPolicy=Cluster: kube-proxy masquerades pod→LB-IP
// traffic, so the LB's anti-loopback sends it elsewhere), and the proof that
// it is gone. The diagnosis is the same code as `clbprobe diagnose --netns`.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline/promises';
import { runLive } from '../cli/diagnose.js';
import { hasActive } from '../detect/index.js';
import { renderText } from '../detect/render.js';
import type { Finding } from '../detect/types.js';
import { LAB, createLoopLab, type LoopLab } from './lab.js';

export interface DemoOptions {
  /** Network namespace name prefix; every namespace the demo creates starts with it. */
  prefix: string;
  /** Wait for Enter between steps (only when stdin is a terminal). */
  pause: boolean;
  color: boolean;
  out: NodeJS.WritableStream;
}

/** What the demo saw; `fixed` is the whole point: loop before, none after. */
export interface DemoOutcome {
  loopSeen: boolean;
  loopDiagnosed: boolean;
  fixed: boolean;
}

const CONNECT_TIMEOUT_MS = 2000;

/** The lab being run, so a signal handler can tear it down. */
let running: { lab?: LoopLab; dir?: string } = {};

/** Removes whatever the demo has built so far; safe to call twice and from a signal handler. */
export function cleanUp(): void {
  running.lab?.destroy();
  if (running.dir) rmSync(running.dir, { recursive: true, force: true });
  running = {};
}

export async function runDemo(opts: DemoOptions): Promise<DemoOutcome> {
  const say = (s = ''): void => void opts.out.write(`${s}\n`);
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
    say(`  LB      ${lab.lb.name}: VIP ${LAB.vip}:${LAB.port} -> ${LAB.node1}:${LAB.nodePort} (node1's NodePort), no SNAT;`);
    say(`          traffic from node1's own address goes to node2 (${LAB.node2}:${LAB.nodePort}) instead: its anti-loopback`);
    say(`  node1   ${lab.node.name}: kube-proxy rules for Service lab/web (type LoadBalancer, externalTrafficPolicy=Local)`);
    say(`  pods    client ${LAB.clientPod} (${lab.pod.name}), server ${LAB.serverPod}:${LAB.serverPort} (${lab.server.name}), both on node1`);

    await step(1, `The client pod connects to the Service's LB IP ${LAB.vip}:${LAB.port}`);
    const first = await lab.connect(CONNECT_TIMEOUT_MS);
    const loopSeen = first === 'timeout';
    say(`  result: ${first}`);
    if (loopSeen) {
      say('  The SYN left node1 with the pod as source (ETP=Local: no masquerade), the LB sent it back to node1\'s');
      say('  NodePort, node1 DNATed it to the server pod next door, and the server\'s SYN-ACK went straight to the');
      say('  client from the pod IP, not from the VIP: the client drops it and the connect hangs.');
    }

    await step(2, 'clbprobe diagnose on node1 (same code as `clbprobe diagnose --netns NODE1`)');
    const before = await diagnose(lab, running.dir);
    say(indent(renderText(before, { color: opts.color, nodeName: LAB.node1Name })));
    const loopDiagnosed = before.findings.some((f) => f.mechanism === 'L4-loop' && f.severity === 'active');

    await step(3, 'The fix: externalTrafficPolicy=Cluster on lab/web');
    lab.setEtp('Cluster');
    say('  node1 now runs kube-proxy\'s ETP=Cluster rules: pod->LB-IP traffic is masqueraded to the node address');
    say(`  (KUBE-EXT -> KUBE-MARK-MASQ; ${LAB.vip} left KUBE-LOAD-BALANCER-LOCAL), so the LB sees node1 as the source`);
    say('  and sends the connection to another backend. node1\'s old conntrack entries were flushed.');

    await step(4, `The client pod connects to ${LAB.vip}:${LAB.port} again`);
    const second = await lab.connect(CONNECT_TIMEOUT_MS);
    say(`  result: ${second}`);
    if (second === 'connected node2') say('  The LB sent it to node2 (its other backend), which answered: no loop.');

    await step(5, 'clbprobe diagnose on node1 again');
    const after = await diagnose(lab, running.dir);
    say(indent(renderText(after, { color: opts.color, nodeName: LAB.node1Name })));
    const fixed = second.startsWith('connected') && !hasActive(after.findings);

    say();
    say(verdict({ loopSeen, loopDiagnosed, fixed }, after.findings));
    return { loopSeen, loopDiagnosed, fixed };
  } finally {
    cleanUp();
    say('Lab removed (all its network namespaces and processes).');
  }
}

async function diagnose(lab: LoopLab, dir: string): ReturnType<typeof runLive> {
  return runLive({ clusterFile: lab.writeClusterFile(dir), netns: lab.node.path }, LAB.node1Name);
}

function indent(text: string): string {
  return text.replace(/\n$/, '').replace(/^(?=.)/gm, '  ');
}

function verdict(o: DemoOutcome, after: Finding[]): string {
  if (o.loopSeen && o.loopDiagnosed && o.fixed) return 'Result: loop detected (L4-loop, active) and fixed (connect works, no active finding).';
  const why = [
    o.loopSeen ? '' : 'the first connect did not loop',
    o.loopDiagnosed ? '' : 'diagnose did not report an active L4-loop',
    o.fixed ? '' : `after the fix: ${after.filter((f) => f.severity === 'active').map((f) => f.mechanism).join(', ') || 'the connect still failed'}`,
  ].filter(Boolean);
  return `Result: the demo did not go as expected: ${why.join('; ')}.`;
}
