// `sysctl -a` lines, keeping what decides if a looped packet survives: rp_filter (strict drops the return leg),
// route_localnet and conntrack's; a malformed line is a warning.
import { lineIssue } from '../kernel/nat/errors.js';
import { BundleParseError, excerpt } from './errors.js';

export interface SysctlSnapshot {
  /** Every "key = value" line of the kept families, verbatim. */
  raw: Record<string, string>;
  /** net.ipv4.conf.<iface>.rp_filter by interface name ('all', 'default' included). */
  rpFilter: Record<string, number>;
  /** net.ipv4.conf.<iface>.route_localnet by interface name. */
  routeLocalnet: Record<string, number>;
  /** net.netfilter.nf_conntrack_<name> (the part after the prefix) → value; numbers when numeric. */
  conntrack: Record<string, number | string>;
}

const LINE = /^([A-Za-z0-9_.\-/]+)\s*=\s?(.*)$/;
const CONF = /^net\.ipv4\.conf\.(.+)\.(rp_filter|route_localnet)$/;
const CT_PREFIX = 'net.netfilter.nf_conntrack_';
/** What procps prints for keys it cannot read; not a format problem. */
const SYSCTL_COMPLAINT = /^sysctl: /;

export function parseSysctl(text: string, file: string): { value: SysctlSnapshot; warnings: string[] } {
  const value: SysctlSnapshot = { raw: {}, rpFilter: {}, routeLocalnet: {}, conntrack: {} };
  const warnings: string[] = [];
  let lines = 0;
  let firstBad: number | undefined;
  for (const [idx, rawLine] of text.split('\n').entries()) {
    const line = rawLine.replace(/\r$/, '').trim();
    if (line === '' || line.startsWith('#') || SYSCTL_COMPLAINT.test(line)) continue;
    const m = LINE.exec(line);
    if (!m) {
      firstBad ??= idx + 1;
      warnings.push(lineIssue(file, idx + 1, `not "key = value": ${excerpt(line)}; line skipped`));
      continue;
    }
    lines++;
    const key = m[1]!.replaceAll('/', '.');
    const val = m[2]!.trim();
    const conf = CONF.exec(m[1]!);
    if (conf) {
      // sysctl(8) writes dots in interface names (VLANs: eth0.100) as '/'.
      const iface = conf[1]!.replaceAll('/', '.');
      if (!/^\d+$/.test(val)) {
        warnings.push(
          lineIssue(file, idx + 1, `${conf[2]} of ${iface} is ${JSON.stringify(val)}, not a number; ignored`),
        );
        continue;
      }
      (conf[2] === 'rp_filter' ? value.rpFilter : value.routeLocalnet)[iface] = Number(val);
      value.raw[`net.ipv4.conf.${iface}.${conf[2]}`] = val;
    } else if (key.startsWith(CT_PREFIX)) {
      value.conntrack[key.slice(CT_PREFIX.length)] = /^\d+$/.test(val) ? Number(val) : val;
      value.raw[key] = val;
    }
  }
  if (lines === 0 && firstBad !== undefined) {
    throw new BundleParseError(file, firstBad, 'no "key = value" line: not sysctl -a output');
  }
  return { value, warnings };
}

/** The kernel's rp_filter for an interface: max(conf.all, conf.<iface>), undefined when neither is known. */
export function effectiveRpFilter(sysctls: SysctlSnapshot, iface: string): number | undefined {
  const all = sysctls.rpFilter.all;
  const own = sysctls.rpFilter[iface];
  if (all === undefined && own === undefined) return undefined;
  return Math.max(all ?? 0, own ?? 0);
}
