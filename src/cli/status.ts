// `clbprobe status`: the whole cluster's findings in one table, from every agent through the evidence relay, each
// agent showing only the Services the caller may get.
import { writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import type { Severity } from '../detect/types.js';
import { EXIT_ERROR, EXIT_FINDING, EXIT_OK, failing, intFlag, namespacedFlag, UserError } from './errors.js';
import {
  addOptions,
  checkFixCommands,
  DEFAULT_RELAY,
  FIX_COMMANDS_OPTION,
  type OptionRow,
  workstationOptions,
} from './options.js';

interface StatusFlags {
  kubeconfig?: string;
  context?: string;
  relay: string;
  timeout: string;
  service?: string;
  namespace?: string;
  node?: string;
  severity?: Severity;
  json?: boolean;
  html?: string;
  fixCommands?: boolean;
}

const OPTIONS: readonly OptionRow[] = [
  ...workstationOptions(),
  ['--relay <ns/name>', "the evidence relay's Service", DEFAULT_RELAY],
  ['--timeout <seconds>', "give up on the relay after this long (each agent has the relay's --status-timeout)", '60'],
  ['--service <name>', 'only this Service: NAMESPACE/NAME, or NAME in any namespace'],
  ['--namespace <ns>', 'only Services in this namespace'],
  ['--node <name>', 'only findings on this node (and only its line if it did not answer)'],
  ['--severity <level>', 'only findings of this severity or worse', undefined, ['active', 'risk']],
  ['--json', 'print nodes, one row per Service and mechanism, and the findings as JSON'],
  [
    '--html <file>',
    "also write one page for the cluster: the table, then per Service each node's findings with the loop drawings",
  ],
  FIX_COMMANDS_OPTION,
];

export function register(program: Command): void {
  const command = program
    .command('status')
    .description(
      "The cluster's LB loopback in one table: each Service with a finding on some\n" +
        'node, its mechanism, its worst severity, and the nodes where it is active or\n' +
        'at risk. Asks every agent through the evidence relay (deploy/evidence-relay.yaml)\n' +
        'with your own token: you see the findings of the Services you may get, nothing\n' +
        'else. Agents that do not answer are listed with the reason.',
    );
  addOptions(command, OPTIONS)
    .addHelpText(
      'after',
      `
Examples:
  kubectl clbprobe status                             every Service with a finding, and its nodes
  kubectl clbprobe status --namespace shop --severity active
  kubectl clbprobe status --service shop/web --fix-commands
  kubectl clbprobe status --json | jq '.services[] | select(.severity=="active")'
  kubectl clbprobe status --html cluster.html         one page to attach to the incident

Needs: get services/proxy on the relay's Service (deploy/oncall-rbac.yaml), and get on the Services to see.

Exit codes: 0 nothing active and every agent answered, 1 an active loopback was found (conntrack shows it),
2 errors, or no active loop among the answers while no agent answered, or some did not or only in part (the answer
is incomplete).`,
    )
    .action(
      failing(async (flags: StatusFlags) => {
        process.exitCode = await run(flags);
      }),
    );
}

async function run(flags: StatusFlags): Promise<number> {
  checkFixCommands('status', flags);
  const timeoutS = intFlag(flags.timeout, '--timeout', 3600, 'seconds');
  const relay = namespacedFlag(flags.relay, '--relay');
  const [{ loadWorkstationConfig }, { askRelay }, cs, { renderFixCommands }] = await Promise.all([
    import('../remote/workstation-client.js'),
    import('../remote/relay-client.js'),
    import('../remote/cluster-status.js'),
    import('../detect/render.js'),
  ]);
  const kc = loadWorkstationConfig(flags.kubeconfig, flags.context);
  const all: import('../remote/cluster-status.js').ClusterStatus = { findings: [], nodes: [], malformed: [] };
  let summary = false;
  const onLine = (text: string): void => {
    if (text.includes('"type":"summary"')) summary = true;
    cs.addStatusLine(all, text);
  };
  await askRelay(
    kc,
    { namespace: relay.namespace, service: relay.name },
    new URLSearchParams(),
    onLine,
    timeoutS * 1000,
    'status',
  );
  if (!summary) throw new UserError('the evidence relay ended without its summary (a relay older than /status?)');
  const st = cs.filterStatus(all, flags);
  process.stdout.write(
    flags.fixCommands ? renderFixCommands(st.findings) : flags.json ? cs.renderStatusJson(st) : cs.renderStatusText(st),
  );
  if (flags.html) {
    writeFileSync(flags.html, cs.renderStatusHtml(st, new Date().toISOString()));
    process.stderr.write(`status: wrote ${flags.html}\n`);
  }
  if (flags.node !== undefined && st.nodes.length === 0)
    process.stderr.write(`status: no agent answered for node ${JSON.stringify(flags.node)}\n`);
  if (st.findings.some((f) => f.severity === 'active')) return EXIT_FINDING;
  return cs.answeredInFull(st) ? EXIT_OK : EXIT_ERROR;
}
