// A stand-in agent for the crash tests: attaches the eBPF counters to an
// interface of a namespace, prints "ready <mode>", then idles until killed.
//   node --import tsx test/lab/capture-agent.ts <ifname> <netnsPath> <tcx|tc>
import { EbpfCounter } from '../../src/capture/ebpf.js';
import { labTargets } from './capture-lab.js';

const [ifname, netnsPath, mode] = process.argv.slice(2);
if (!ifname || !netnsPath || (mode !== 'tcx' && mode !== 'tc')) {
  process.stderr.write('usage: capture-agent.ts <ifname> <netnsPath> <tcx|tc>\n');
  process.exit(2);
}
const counter = EbpfCounter.open({ ifname, netnsPath, attach: mode });
counter.setTargets(labTargets());
process.stdout.write(`ready ${counter.attachMode}\n`);
setInterval(() => counter.read(), 1000);
