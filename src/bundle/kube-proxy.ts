// kube-proxy's mode from its process: --proxy-mode, else `mode:` in its --config (via /proc/PID/root), else default.
import { readdirSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { errText } from '../errors.js';
import { FileTooLargeError, readFileBounded } from '../read-bounded.js';
import type { KubeProxyInfo } from './manifest.js';

/** kube-proxy's built-in default on Linux when no mode is configured. */
const DEFAULT_MODE = 'iptables';

/** A KubeProxyConfiguration is ~2 KB (kubeadm's, every field set); 1 MiB leaves any real one room. */
export const MAX_KUBE_PROXY_CONFIG_BYTES = 1 << 20;

/** The value of `--name=V` or `--name V` in args. */
function flagValue(args: string[], name: string): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a.startsWith(`${name}=`)) return a.slice(name.length + 1);
    if (a === name) return args[i + 1];
  }
  return undefined;
}

/** Top-level `mode:` of a KubeProxyConfiguration (YAML, unindented; or JSON); '' when present but empty. */
export function modeFromConfig(text: string): string | undefined {
  // Line by line with blanks that never cross a line: `\s*` under /m made blank lines quadratic.
  for (const line of text.split('\n')) {
    const m = /^(?:mode|[ \t]*"mode")[ \t]*:[ \t]*"?([A-Za-z]*)"?[ \t]*,?[ \t]*(#.*)?\r?$/.exec(line);
    if (m) return m[1];
  }
  return undefined;
}

/** The mode for these args; readConfig returns undefined when unreadable, and an error it throws is the reason. */
export function proxyModeOf(args: string[], readConfig: (path: string) => string | undefined): KubeProxyInfo {
  const flag = flagValue(args, '--proxy-mode');
  if (flag) return { mode: flag, source: '--proxy-mode flag' };
  const config = flagValue(args, '--config');
  if (config) {
    let text: string | undefined;
    try {
      text = readConfig(config);
    } catch (e) {
      return { source: `config file ${config} could not be read: ${errText(e)}` };
    }
    if (text === undefined) return { source: `config file ${config} could not be read` };
    const mode = modeFromConfig(text);
    if (mode) return { mode, source: `config file ${config}: mode` };
    return { mode: DEFAULT_MODE, source: `config file ${config} sets no mode: kube-proxy's default` };
  }
  return { mode: DEFAULT_MODE, source: "no --proxy-mode and no --config: kube-proxy's default" };
}

/** Looks for a kube-proxy process under procRoot; an explanation when there is none. */
export function findKubeProxy(procRoot = '/proc'): KubeProxyInfo {
  let pids: string[];
  try {
    pids = readdirSync(procRoot).filter((d) => /^\d+$/.test(d));
  } catch (e) {
    return { source: `cannot list ${procRoot}: ${errText(e)}` };
  }
  for (const pid of pids) {
    let args: string[];
    try {
      args = readFileSync(join(procRoot, pid, 'cmdline'), 'utf8').split('\0');
    } catch {
      continue; // the process exited meanwhile, or is not ours to read
    }
    if (args[args.length - 1] === '') args.pop();
    if (args.length === 0 || basename(args[0]!) !== 'kube-proxy') continue;
    const readConfig = (path: string): string | undefined => {
      try {
        return readFileBounded(
          join(procRoot, pid, 'root', path),
          MAX_KUBE_PROXY_CONFIG_BYTES,
          'kube-proxy config file',
        ).toString('utf8');
      } catch (e) {
        if (e instanceof FileTooLargeError) throw e;
        return undefined;
      }
    };
    return { ...proxyModeOf(args.slice(1), readConfig), pid: Number(pid), args };
  }
  return { source: `no kube-proxy process in ${procRoot} (not in this PID namespace, or the node runs another proxy)` };
}
