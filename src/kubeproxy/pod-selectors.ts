// kube-proxy's local traffic detector (how it tells pod traffic apart) read back from its nat rules: the source of
// its "pod traffic" / "Redirect pods" rules and the negated source of its masquerade rules for cluster IPs.
import { mayContain } from '../kernel/nat/lines.js';
import type { NatRules } from '../kernel/nat/nat-rules.js';
import { findOptions } from '../kernel/nat/rule-spec.js';
import type { IptablesRule } from '../kernel/nat/types.js';
import { flatCopy } from './own-text.js';

/** How kube-proxy recognises pod traffic here (its "local traffic detector"). */
export interface PodSelectors {
  cidrs: string[];
  interfaces: string[];
}

const POD_TRAFFIC = 'pod traffic for ';
const REDIRECT_PODS = 'Redirect pods trying to reach external';

/** The selectors of every rule of the nat table, in chain order then rule order, without repeats. */
export function podSelectorsOf(chains: NatRules): PodSelectors {
  const cidrs = new Set<string>();
  const interfaces = new Set<string>();
  for (const name of chains.chainNames()) {
    for (const rule of chains.rules(name, mayAddPodSelectors)) {
      const sel = podSelectorsOfRule(rule);
      for (const cidr of sel?.cidrs ?? []) cidrs.add(cidr);
      for (const iface of sel?.interfaces ?? []) interfaces.add(iface);
    }
  }
  return { cidrs: [...cidrs], interfaces: [...interfaces] };
}

/** What one rule adds to the detector ("! -s podCIDR ... -j KUBE-MARK-MASQ" adds podCIDR), copied off its line. */
function podSelectorsOfRule(rule: IptablesRule): PodSelectors | undefined {
  const comment = rule.comment ?? '';
  const podRule = comment.startsWith(POD_TRAFFIC) || comment.startsWith(REDIRECT_PODS);
  if (!podRule && rule.target !== 'KUBE-MARK-MASQ') return undefined;
  // A pod rule selects its sources; a masquerade rule all but its negated ones.
  const values = (name: string): string[] =>
    findOptions(rule.matches, name, '')
      .filter((o) => o.negated !== podRule)
      .map((o) => flatCopy(o.values[0]!));
  return { cidrs: values('-s'), interfaces: values('-i') };
}

/** Whether a rule line can add to the detector, read without parsing it (mayContain looks through quotes). */
function mayAddPodSelectors(line: string): boolean {
  if (mayContain(line, POD_TRAFFIC) || mayContain(line, REDIRECT_PODS)) return true;
  return line.includes('!') && mayContain(line, 'KUBE-MARK-MASQ');
}
