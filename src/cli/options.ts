// Options as table rows in --help order, so a command states each flag in one line and commands share rows.
import { type Command, Option } from 'commander';
import { UserError } from './errors.js';

type Collect = (text: string, previous: string[]) => string[];

/** Flags, help, then a default (or a parser that collects repeats), then the allowed values. */
export type OptionRow = readonly [flags: string, help: string, value?: string | Collect, choices?: readonly string[]];

export function optionOf([flags, help, value, choices]: OptionRow): Option {
  const option = new Option(flags, help);
  if (typeof value === 'function') option.argParser(value);
  else if (value !== undefined) option.default(value);
  return choices ? option.choices(choices) : option;
}

export function addOptions(command: Command, rows: readonly OptionRow[]): Command {
  for (const row of rows) command.addOption(optionOf(row));
  return command;
}

/** Defaults that match deploy/daemonset.yaml (test/unit/remote checks they still do). */
export const AGENT_DEFAULTS = {
  namespace: 'clbprobe',
  selector: 'app.kubernetes.io/name=clbprobe',
  container: 'agent',
} as const;

/** Where the agent pods are, for `evidence --all-nodes` and the relay. */
export const AGENT_POD_OPTIONS: readonly OptionRow[] = [
  ['--agent-namespace <ns>', "the agent pods' namespace", AGENT_DEFAULTS.namespace],
  ['--agent-selector <labels>', 'label selector of the agent pods', AGENT_DEFAULTS.selector],
  ['--container <name>', 'the agent container in those pods', AGENT_DEFAULTS.container],
];

/** The relay's Service when --relay is not given. */
export const DEFAULT_RELAY = 'clbprobe/clbprobe-evidence';

/** The workstation's --kubeconfig and --context rows; `prefix` starts their help. */
export const workstationOptions = (prefix = ''): OptionRow[] => [
  ['--kubeconfig <file>', `${prefix}kubeconfig (default: KUBECONFIG, ~/.kube/config, in-cluster)`],
  ['--context <name>', `${prefix}the kubeconfig context to use (default: its current-context), as kubectl's --context`],
];

export const FIX_COMMANDS_OPTION: OptionRow = [
  '--fix-commands',
  'print only the fixes that change a Kubernetes object, as kubectl ' +
    'commands, each with what it changes for clients (clbprobe applies none)',
];

/** The JSON carries each finding's fixes, so diagnose and status refuse --fix-commands with it. */
export function checkFixCommands(command: string, flags: { fixCommands?: boolean; json?: boolean }): void {
  if (flags.fixCommands && flags.json)
    throw new UserError(`${command}: --fix-commands and --json exclude each other (the JSON has each finding's fixes)`);
}
