// The NAT read the agent and the snapshot use: the kernel reader's result, and in a facts-only read kube-proxy's
// facts derived from its nat tables there and then, so that only the facts outlive the read (NatFactsSnapshot).
import { type ReadNatOptions, type ReadNatResult, readNat } from '../kernel/nat/read.js';
import { FILTER_DROP_CHAINS, type NatFactsSnapshot, natRulesFacts } from './facts.js';

export async function readNatFacts(
  opts: ReadNatOptions = {},
): Promise<Omit<ReadNatResult, 'nat' | 'tables'> & { nat?: NatFactsSnapshot }> {
  const { tables, ...read } = await readNat({ ...opts, filterChains: FILTER_DROP_CHAINS });
  if (!tables || !read.nat) return read;
  return { ...read, nat: { ...read.nat, facts: natRulesFacts(tables.rules, tables.ipsets) } };
}
