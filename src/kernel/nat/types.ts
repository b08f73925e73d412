// Placeholder owned by the NAT reader work (src/kernel/nat); replaced there.
export interface NatSnapshot {
  backend?: 'legacy' | 'nft';
}
