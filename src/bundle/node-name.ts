// Which Node a hand-made bundle comes from: the one whose status.addresses holds an address bound on this node's
// interfaces (kube-ipvs0's VIPs excluded, since every node has those).
import type { SourcedObject } from '../cluster/objects.js';
import { canonicalIP, ipFamily } from '../kernel/ip.js';
import type { AddressSnapshot } from '../kernel/types.js';

export function nodeNameByAddress(
  nodes: readonly SourcedObject[],
  addresses: AddressSnapshot | undefined,
): { name: string; from: string } | undefined {
  const local = new Set<string>();
  for (const iface of addresses?.interfaces ?? []) {
    if (iface.isKubeIpvs || iface.name === 'lo') continue;
    for (const a of iface.addresses) local.add(a.address);
  }
  for (const { object } of nodes) {
    const o = object as { metadata?: { name?: unknown }; status?: { addresses?: unknown } };
    const name = o?.metadata?.name;
    const list = o?.status?.addresses;
    if (typeof name !== 'string' || !Array.isArray(list)) continue;
    for (const a of list as { type?: unknown; address?: unknown }[]) {
      if (typeof a?.address !== 'string' || ipFamily(a.address) === 0) continue;
      if (local.has(canonicalIP(a.address)))
        return { name, from: `Node ${name} has ${a.type ?? 'address'} ${a.address}, bound on this node` };
    }
  }
  return undefined;
}
