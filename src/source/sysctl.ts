// The kernel settings that decide whether a looped packet survives (bundle only).
import { BUNDLE_FILES } from '../bundle/names.js';
import { parseSysctl, type SysctlSnapshot } from '../bundle/parse-sysctl.js';
import { fromBundleFile, type SourceDef } from './contract.js';

/** Kernel-side keys kept from `sysctl -a`. */
const SYSCTL_KEYS = /^net\.(ipv4\.conf\.[^.\s]+\.(rp_filter|route_localnet)|netfilter\.nf_conntrack_\w+)\s*=/;

export const sysctl: SourceDef<SysctlSnapshot> = {
  name: 'sysctl',
  async collect(writer) {
    await writer.run(BUNDLE_FILES.sysctl, ['sysctl', '-a'], (out) =>
      out
        .split('\n')
        .filter((l) => SYSCTL_KEYS.test(l))
        .join('\n')
        .concat('\n'),
    );
  },
  fromBundle: (b) =>
    fromBundleFile(b, BUNDLE_FILES.sysctl, (text, path) => ({ state: 'up', ...parseSysctl(text, path) })),
};
