// `clbprobe agent`'s flags through commander's real parse path (the registered command, its choices,
// defaults and env) into the Agent's options and from there into the eBPF counter's options.
import { Command } from 'commander';
import { afterEach, describe, expect, it } from 'vitest';
import { counterOptions } from '../../../src/agent/agent.js';
import { type AgentFlags, agentOptions, register } from '../../../src/cli/agent.js';
import { createLogger } from '../../../src/log.js';

const log = createLogger('silent');

/** Parses `agent ARGS` with the registered command, its action replaced so that nothing starts. */
function parseAgent(args: string[]): AgentFlags {
  const program = new Command().exitOverride();
  register(program);
  const agent = program.commands.find((c) => c.name() === 'agent')!;
  let parsed: AgentFlags | undefined;
  agent
    .exitOverride()
    .configureOutput({ writeErr: () => undefined })
    .action((flags: AgentFlags) => {
      parsed = flags;
    });
  program.parse(['agent', ...args], { from: 'user' });
  return parsed!;
}

const attachOf = (args: string[]) => counterOptions(agentOptions(parseAgent(args), log), 'ebpf', 'eth0').attach;

describe('clbprobe agent --tc-attach', () => {
  afterEach(() => {
    delete process.env.CLBPROBE_TC_ATTACH;
  });

  it('reaches the eBPF counter as its attach mode', () => {
    expect(attachOf(['--tc-attach', 'tc'])).toBe('tc');
    expect(attachOf(['--tc-attach=tcx'])).toBe('tcx');
  });

  it('defaults to auto: TCX where the kernel has it, else cls_bpf', () => {
    expect(attachOf([])).toBe('auto');
  });

  it('is read from CLBPROBE_TC_ATTACH as the other agent flags are from their env', () => {
    process.env.CLBPROBE_TC_ATTACH = 'tc';
    expect(attachOf([])).toBe('tc');
  });

  it('refuses a mode it does not know', () => {
    expect(() => parseAgent(['--tc-attach', 'xdp'])).toThrow(/Allowed choices are auto, tcx, tc/);
  });

  it('keeps the counter on the uplink and in the namespace the agent was given', () => {
    const opts = counterOptions(
      agentOptions(parseAgent(['--netns', '/proc/self/ns/net', '--tc-attach', 'tc']), log),
      'pcap',
      'ens5',
    );
    expect(opts).toMatchObject({ ifname: 'ens5', netnsPath: '/proc/self/ns/net', backend: 'pcap', attach: 'tc' });
  });
});
