#!/usr/bin/env node
// clbprobe command-line entry: one binary, one subcommand per job.
// Each subcommand lives in its own file and exports register(program).
import { Command } from 'commander';
import { errText } from '../errors.js';
import { register as registerAgent } from './agent.js';
import { register as registerCleanup } from './cleanup.js';
import { register as registerCollect } from './collect.js';
import { register as registerDemo } from './demo.js';
import { register as registerDiagnose } from './diagnose.js';
import { register as registerEvidence } from './evidence.js';
import { register as registerEvidenceRelay } from './evidence-relay.js';
import { register as registerSnapshot } from './snapshot.js';
import { register as registerStatus } from './status.js';

const program = new Command();
program
  .name('clbprobe')
  .description(
    'Find, count and explain cloud load-balancer loopback on a Kubernetes node\n' +
      '(pods calling a Service through its LB IP, with 4-second delays or timeouts).',
  )
  .version(process.env.npm_package_version ?? '0.1.0')
  .showHelpAfterError('(run with --help for usage)')
  .addHelpText(
    'after',
    `
Examples:
  clbprobe snapshot                      what this node's datapath looks like
  clbprobe snapshot --json --conntrack   the full typed snapshot, with conntrack entries`,
  );

registerSnapshot(program);
registerDiagnose(program);
registerCollect(program);
registerAgent(program);
registerEvidence(program);
registerDemo(program);
registerEvidenceRelay(program);
registerCleanup(program);
registerStatus(program);

program.parseAsync(process.argv).catch((e: unknown) => {
  process.stderr.write(`clbprobe: ${errText(e)}\n`);
  process.exit(2);
});
