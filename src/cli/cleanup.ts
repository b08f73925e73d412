// `clbprobe cleanup`: removes the legacy tc filters (and unused clsact qdisc) a killed agent left; run by preStop.
import type { Command } from 'commander';
import { createLogger } from '../log.js';
import { netnsPath } from '../netns-path.js';
import { failing } from './errors.js';

interface CleanupFlags {
  interface?: string;
  netns?: string;
  logLevel: string;
}

async function run(flags: CleanupFlags): Promise<void> {
  const { bpfAddon } = await import('../native/bpf.js');
  const { cleanupTc } = await import('../capture/tc-cleanup.js');
  const log = createLogger(flags.logLevel);
  const done = await cleanupTc(bpfAddon(), {
    ...(flags.interface ? { ifname: flags.interface } : {}),
    ...(flags.netns ? { netnsPath: netnsPath(flags.netns) } : {}),
    log,
  });
  if (!done.length) process.stdout.write('no clbprobe tc filters found\n');
  for (const d of done) {
    const qdisc = d.qdiscDeleted
      ? 'clsact qdisc deleted'
      : `clsact qdisc kept (${d.otherFilters} other filter entries on it)`;
    process.stdout.write(`${d.ifname}: removed ${d.removedFilters} clbprobe tc filter(s); ${qdisc}\n`);
  }
}

export function register(program: Command): void {
  program
    .command('cleanup')
    .description(
      'Remove the legacy tc (cls_bpf) filters a killed agent left ' +
        '(kernels before 6.6; TCX links go with the process),\n' +
        'on every interface or --interface, and the clsact qdisc ' +
        'where no other filter is attached. Needs NET_ADMIN and BPF.',
    )
    .option('--interface <ifname>', 'only this interface')
    .option('--netns <name>', 'in network namespace NAME or a path (tests)')
    .option('--log-level <level>', 'pino level', 'warn')
    .action(failing(run));
}
