// This node's addresses by role, from the address snapshot and the Node object.
import type { NodeView } from '../cluster/types.js';
import { inCidr, ipFamily, ipv4Number } from '../kernel/ip.js';
import type { AddressSnapshot } from '../kernel/types.js';
import type { LocalAddresses } from './core-types.js';

function isLoopback(ip: string): boolean {
  return ip === '::1' || (ipFamily(ip) === 4 && inCidr(ip, '127.0.0.0/8'));
}

function networkOf(address: string, prefixLen: number): string {
  const n = ipv4Number(address);
  if (n === undefined) return `${address}/${prefixLen}`;
  const masked = prefixLen === 0 ? 0 : (n & (~0 << (32 - prefixLen))) >>> 0;
  return `${[24, 16, 8, 0].map((s) => (masked >>> s) & 0xff).join('.')}/${prefixLen}`;
}

/** Node IPs, kube-ipvs0 IPs and pod CIDRs (from the Node, else the CNI bridge subnet). */
export function localAddresses(addresses: AddressSnapshot | undefined, node: NodeView | undefined): LocalAddresses {
  const nodeIps = new Set<string>();
  const ipvsIps = new Set<string>();
  const bridgeNets: string[] = [];
  for (const iface of addresses?.interfaces ?? []) {
    for (const a of iface.addresses) {
      if (isLoopback(a.address)) continue;
      if (iface.isKubeIpvs) ipvsIps.add(a.address);
      else {
        nodeIps.add(a.address);
        if (iface.kind === 'bridge' && a.scope === 'global') bridgeNets.push(networkOf(a.address, a.prefixLen));
      }
    }
  }
  for (const a of node?.addresses ?? []) if (ipFamily(a.address) !== 0) nodeIps.add(a.address);
  const podCidrs = node && node.podCIDRs.length > 0 ? node.podCIDRs : bridgeNets;
  return { nodeIps: [...nodeIps], ipvsIps: [...ipvsIps], podCidrs };
}
