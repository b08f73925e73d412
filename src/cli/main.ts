#!/usr/bin/env node
// clbprobe command-line entry: one binary, one subcommand per job.
// Each subcommand lives in its own file and exports register(program), called in --help order.
import { Command } from 'commander';
import { errText } from '../errors.js';
import * as agent from './agent.js';
import * as cleanup from './cleanup.js';
import * as collect from './collect.js';
import * as demo from './demo.js';
import * as diagnose from './diagnose.js';
import * as evidence from './evidence.js';
import * as evidenceRelay from './evidence-relay.js';
import * as snapshot from './snapshot.js';
import * as status from './status.js';

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

for (const command of [snapshot, diagnose, collect, agent, evidence, demo, evidenceRelay, cleanup, status])
  command.register(program);

program.parseAsync(process.argv).catch((e: unknown) => {
  process.stderr.write(`clbprobe: ${errText(e)}\n`);
  process.exit(2);
});
