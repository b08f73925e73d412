// `clbprobe demo`: a namespace lab where a pod's connect to its Service's LB IP loops, diagnosed, fixed and removed.
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Command } from 'commander';
import { EXIT_FINDING, EXIT_OK, failing, UserError } from './errors.js';

interface DemoFlags {
  pause: boolean;
  netnsPrefix: string;
  html: string;
}

export function register(program: Command): void {
  program
    .command('demo')
    .description(
      'Show LB loopback and its fix on this machine, in network namespaces it creates and removes:\n' +
        'a client pod, a server pod, two nodes with kube-proxy rules, and an LB that does not SNAT;\n' +
        'the clbprobe agent runs on node1 and its /metrics counters show the loop and its end.\n' +
        'Needs root (iproute2, iptables, ipset, conntrack). Touches nothing outside its namespaces.',
    )
    .option('--no-pause', 'run straight through instead of waiting for Enter between steps')
    .option('--netns-prefix <prefix>', 'name prefix of the namespaces it creates', 'clbdemo-')
    .option(
      '--html <file>',
      "where to write the loop's diagnosis as an HTML page",
      join(tmpdir(), 'clbprobe-demo-node1.html'),
    )
    .addHelpText(
      'after',
      `
Examples:
  sudo clbprobe demo              step by step (Enter to continue, Ctrl-C to stop and clean up)
  sudo clbprobe demo --no-pause   the whole story at once, e.g. in CI

Exit codes: 0 the loop was seen, diagnosed, counted and fixed; 1 it was not; 2 errors (e.g. not root).`,
    )
    .action(
      failing(async (flags: DemoFlags) => {
        const onSignal = (sig: NodeJS.Signals): void => {
          void import('../demo/run.js')
            .then(({ cleanUp }) => cleanUp())
            .finally(() => {
              process.stderr.write(`clbprobe demo: ${sig}: lab removed\n`);
              process.exit(128 + (sig === 'SIGINT' ? 2 : 15));
            });
        };
        process.once('SIGINT', onSignal);
        process.once('SIGTERM', onSignal);
        try {
          if (process.getuid?.() !== 0)
            throw new UserError('demo: needs root to create network namespaces (try: sudo clbprobe demo)');
          if (!/^[a-z][a-z0-9-]{0,11}$/.test(flags.netnsPrefix))
            throw new UserError('demo: --netns-prefix must be 1-12 of a-z 0-9 - starting with a letter');
          // Loaded here: `clbprobe agent` (the same binary) need not hold the demo in memory.
          const [{ runDemo }, { wantColor }] = await Promise.all([
            import('../demo/run.js'),
            import('../detect/render.js'),
          ]);
          const o = await runDemo({
            prefix: flags.netnsPrefix,
            pause: flags.pause,
            color: wantColor(process.stdout),
            out: process.stdout,
            htmlFile: resolve(flags.html),
          });
          process.exitCode = o.loopSeen && o.loopDiagnosed && o.counted && o.fixed ? EXIT_OK : EXIT_FINDING;
        } finally {
          process.off('SIGINT', onSignal);
          process.off('SIGTERM', onSignal);
        }
      }),
    );
}
