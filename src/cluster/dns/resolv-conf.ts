// resolv.conf(5) as stub resolvers read it: nameservers and `options timeout:/attempts:`; bad values warn.
// In the DaemonSet (hostNetwork, ClusterFirstWithHostNet) it is the kubelet's file; under `ip netns exec` /etc/netns.
import { isIP } from 'node:net';

/** glibc reads at most 3 nameservers (MAXNS); c-ares takes more, but a longer list is a mistake. */
const MAX_NAMESERVERS = 3;
/** A resolv.conf larger than this is not one (the kubelet writes a few hundred bytes). */
export const MAX_RESOLV_CONF_BYTES = 64 * 1024;

export interface ResolvConf {
  /** Addresses as written (IPv6 link-local keeps its %zone), at most MAX_NAMESERVERS. */
  nameservers: string[];
  /** Per-query timeout in seconds (glibc default 5, capped at 30). */
  timeoutS: number;
  /** Tries per nameserver (glibc default 2, capped at 5). */
  attempts: number;
  warnings: string[];
}

export class ResolvConfError extends Error {}

export function parseResolvConf(text: string, source = 'resolv.conf'): ResolvConf {
  if (text.length > MAX_RESOLV_CONF_BYTES) {
    throw new ResolvConfError(`${source}: ${text.length} bytes, more than ${MAX_RESOLV_CONF_BYTES}: not a resolv.conf`);
  }
  const out: ResolvConf = { nameservers: [], timeoutS: 5, attempts: 2, warnings: [] };
  text.split('\n').forEach((raw, i) => {
    const where = `${source}:${i + 1}`;
    const line = raw.replace(/[#;].*$/, '').trim();
    if (line === '') return;
    const [keyword, ...args] = line.split(/\s+/);
    if (keyword === 'nameserver') {
      const addr = args[0] ?? '';
      const bare = addr.split('%')[0]!;
      if (isIP(bare) === 0) out.warnings.push(`${where}: nameserver ${JSON.stringify(addr)} is not an IP address`);
      else if (out.nameservers.length >= MAX_NAMESERVERS)
        out.warnings.push(`${where}: nameserver ${addr} ignored (only the first ${MAX_NAMESERVERS} are used)`);
      else out.nameservers.push(addr);
    } else if (keyword === 'options') {
      for (const opt of args) {
        const m = /^(timeout|attempts):(\d{1,4})$/.exec(opt);
        if (!m) continue;
        const n = Number(m[2]);
        if (m[1] === 'timeout') out.timeoutS = Math.min(Math.max(n, 1), 30);
        else out.attempts = Math.min(Math.max(n, 1), 5);
      }
    }
  });
  if (out.nameservers.length === 0) out.warnings.push(`${source}: no usable nameserver line`);
  return out;
}
