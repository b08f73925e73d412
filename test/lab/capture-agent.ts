// A stand-in agent for the crash and privilege tests: opens the counters on
// an interface, prints one JSON line {backend, description, attach, warnings}
// (or {error} and exits 2), then answers each "read" line on stdin with the
// reading as JSON, until killed or stdin ends.
//   node --import tsx test/lab/capture-agent.ts <ifname> <netnsPath|-> <tcx|tc|auto>
import { createInterface } from 'node:readline';
import { openCounter } from '../../src/capture/counter.js';
import type { Counter } from '../../src/capture/counter-types.js';
import { EbpfCounter } from '../../src/capture/ebpf.js';
import { labTargets } from './capture-lab.js';

const [ifname, nsArg, mode] = process.argv.slice(2);
if (!ifname || !nsArg || (mode !== 'tcx' && mode !== 'tc' && mode !== 'auto')) {
  process.stderr.write('usage: capture-agent.ts <ifname> <netnsPath|-> <tcx|tc|auto>\n');
  process.exit(2);
}
const netnsPath = nsArg === '-' ? undefined : nsArg;
const warnings: string[] = [];
const logger = {
  warn: (o: { reason?: string }, msg: string) => warnings.push(`${msg}: ${o.reason}`),
  info: () => {},
  error: () => {},
};
try {
  const counter =
    mode === 'auto'
      ? openCounter({ ifname, netnsPath, backend: 'auto', logger: logger as never })
      : EbpfCounter.open({ ifname, netnsPath, attach: mode });
  counter.setTargets(labTargets());
  const attach = counter instanceof EbpfCounter ? counter.attachMode : undefined;
  process.stdout.write(
    `${JSON.stringify({ backend: counter.backend, description: counter.description, attach, fallbackReason: (counter as Counter).fallbackReason, warnings })}\n`,
  );
  createInterface({ input: process.stdin })
    .on('line', (l) => {
      if (l.trim() === 'read')
        process.stdout.write(`${JSON.stringify({ ...counter.read(), stopped: (counter as Counter).stopped })}\n`);
    })
    .on('close', () => {
      counter.close();
      process.exit(0);
    });
} catch (e) {
  process.stdout.write(`${JSON.stringify({ error: e instanceof Error ? e.message : String(e), warnings })}\n`);
  process.exit(2);
}
