// `clbprobe diagnose`: per Service, whether LB loopback can happen or is happening on this node, the proof and the fix.
import { hostname } from 'node:os';
import type { Command } from 'commander';
import type { DiagnoseFlags, RunResult } from '../diagnose/run.js';
import { EXIT_ERROR, EXIT_FINDING, EXIT_OK, failing, UserError } from './errors.js';
import { addOptions, checkFixCommands, FIX_COMMANDS_OPTION, type OptionRow } from './options.js';

const OPTIONS: readonly OptionRow[] = [
  [
    '--cluster-file <file>',
    'Services, EndpointSlices, Ingresses, Nodes and Gateway API objects as `kubectl get ... -o json` wrote them',
  ],
  [
    '--kubeconfig <file>',
    'read the cluster from the API with this kubeconfig (default without --cluster-file: in-cluster service account)',
  ],
  ['--api-timeout <seconds>', 'give up on the API after this long', '20'],
  ['--node-name <name>', 'this node in the cluster view (default: $NODE_NAME, else the hostname)'],
  [
    '--json',
    "print findings and warnings as JSON (each fix that changes a Kubernetes object is in its finding's `fixes`)",
  ],
  FIX_COMMANDS_OPTION,
  [
    '--html <file>',
    'also write the diagnosis as one self-contained HTML page (each active ' +
      'loop drawn, with its conntrack legs), e.g. for an incident ticket',
  ],
  ['--netns <name>', 'diagnose the network namespace NAME (/var/run/netns/NAME) or a path instead of this one'],
  [
    '--from <dir>',
    'diagnose an offline bundle (clbprobe collect --out DIR, or standard command outputs; see src/bundle/README.md)',
  ],
];

export function register(program: Command): void {
  const command = program
    .command('diagnose')
    .description(
      'Tell, per LoadBalancer/Ingress Service, whether LB loopback can happen or is happening on this node:\n' +
        'the mechanism (L4-loop, L7-loop, no-SNAT, hc-drop, port-refused, local-no-ep, direct-pod, drift),\n' +
        'the evidence (conntrack entries, addresses, IPVS and NAT rules) and the fix. Needs root or CAP_NET_ADMIN.',
    );
  addOptions(command, OPTIONS)
    .addHelpText(
      'after',
      [
        '',
        'Examples:',
        '  kubectl get svc,ingress,endpointslices,nodes -A -o json > cluster.json',
        '  clbprobe diagnose --cluster-file cluster.json --node-name node-1',
        `  clbprobe diagnose --cluster-file cluster.json --json | jq '.findings[] | select(.severity=="active")'`,
        '  clbprobe diagnose --from ./node-a-bundle               ' +
          'a bundle collected on (or hand-made from) another node',
        '  clbprobe diagnose --from ./node-a-bundle --html node-a.html   the same, plus a page to attach to the ticket',
        '  clbprobe diagnose --from ./node-a-bundle --fix-commands      e.g. kubectl -n shop ' +
          `patch service web --type merge -p '{"spec":{"externalTrafficPolicy":"Cluster"}}'`,
        '',
        'Exit codes: 0 nothing active, 1 an active loopback was found (conntrack shows it), 2 errors, or nothing',
        'active while conntrack was not read (no CAP_NET_ADMIN, or a bundle without conntrack.txt): unknown.',
      ].join('\n'),
    )
    .action(
      failing(async (flags: DiagnoseFlags) => {
        checkFixCommands('diagnose', flags);
        const [
          { runFromBundle, runLive, writeHtmlReport },
          { hasActive },
          { renderFixCommands, renderJson, renderText, wantColor },
        ] = await Promise.all([
          import('../diagnose/run.js'),
          import('../detect/index.js'),
          import('../detect/render.js'),
        ]);
        let nodeName = flags.nodeName ?? process.env.NODE_NAME ?? hostname();
        let run: RunResult;
        if (flags.from) {
          if (flags.netns) throw new UserError('diagnose: --from and --netns exclude each other');
          const bundle = runFromBundle(flags);
          nodeName = bundle.nodeName;
          run = bundle;
        } else {
          run = await runLive(flags, nodeName);
        }
        const { result } = run;
        process.stdout.write(
          flags.fixCommands
            ? renderFixCommands(result.findings)
            : flags.json
              ? renderJson(result, nodeName)
              : renderText(result, { color: wantColor(process.stdout), nodeName }),
        );
        if (flags.html) {
          writeHtmlReport(flags.html, result, {
            nodeName,
            generatedAt: new Date().toISOString(),
            source: flags.from ? `bundle ${flags.from}` : 'live',
          });
          process.stderr.write(`diagnose: wrote ${flags.html}\n`);
        }
        if (hasActive(result.findings)) process.exitCode = EXIT_FINDING;
        else if (run.conntrackRead) process.exitCode = EXIT_OK;
        else {
          process.stderr.write('diagnose: conntrack not read: nothing is shown active, nor ruled out (exit 2)\n');
          process.exitCode = EXIT_ERROR;
        }
      }),
    );
}
