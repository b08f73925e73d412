// Typed form of `nft -j list table ip|ip6 kube-proxy` (or `nft -j list ruleset`), reduced to what
// src/kubeproxy/nftables.ts and evidence need; each rule keeps its `nft list` text so findings can quote it.

export const NFT_FAMILIES = ['ip', 'ip6', 'inet', 'arp', 'bridge', 'netdev'] as const;
export type NftFamily = (typeof NFT_FAMILIES)[number];

export const NFT_VERDICTS = ['accept', 'drop', 'continue', 'return', 'jump', 'goto', 'queue'] as const;

/** A verdict as nft spells it: accept, drop, continue, return, jump X, goto X. */
export interface NftVerdict {
  kind: (typeof NFT_VERDICTS)[number];
  target?: string;
}

/** One `left op right` match of a rule, both sides as text (`ip saddr`, `10.0.0.0/8`). */
export interface NftMatch {
  left: string;
  /** '==', '!=', 'in', '<', ... (nft prints '==' and 'in' as nothing). */
  op: string;
  right: string;
}

export interface NftRule {
  chain: string;
  handle?: number;
  comment?: string;
  /** The rule as `nft list` prints it (without `# handle`). */
  text: string;
  matches: NftMatch[];
  verdict?: NftVerdict;
  /** A verdict-map lookup: key expression and map ('@service-ips', or the inline map's verdicts). */
  vmap?: { key: string; map?: string; verdicts: NftVerdict[] };
  /** `dnat to ADDR:PORT`, `snat`, `masquerade`. */
  nat?: { kind: 'dnat' | 'snat' | 'masquerade' | 'redirect'; addr?: string; port?: number };
  /** `reject` statement (a terminal verdict in effect). */
  reject?: boolean;
  /** `meta mark set ...`. */
  setsMark?: boolean;
}

export interface NftChain {
  name: string;
  handle?: number;
  /** Base chains only. */
  type?: string;
  hook?: string;
  prio?: number;
  policy?: string;
  comment?: string;
}

export interface NftElement {
  /** The key's parts as text: ['1.2.3.4', 'tcp', '80'] for `1.2.3.4 . tcp . 80`. */
  key: string[];
  /** Verdict maps: where the element sends the packet. */
  verdict?: NftVerdict;
  /** Data maps: the value as text. */
  value?: string;
  comment?: string;
}

export interface NftSet {
  kind: 'set' | 'map';
  name: string;
  handle?: number;
  /** Key type parts: ['ipv4_addr', 'inet_proto', 'inet_service']. */
  type: string[];
  /** Maps: the value type ('verdict', 'ipv4_addr', ...). */
  mapType?: string;
  flags?: string[];
  /** Seconds an element lives (`timeout 3h`: kube-proxy's session-affinity sets). */
  timeout?: number;
  comment?: string;
  elements: NftElement[];
}

export interface NftTable {
  family: NftFamily;
  name: string;
  handle?: number;
  chains: NftChain[];
  /** In listing order (chain by chain, as nft prints them). */
  rules: NftRule[];
  sets: NftSet[];
}

export interface NftDump {
  /** Name of the input (command or file) for warnings and evidence. */
  source: string;
  version?: string;
  tables: NftTable[];
  /** Items that could not be read, each naming the input and the item's position. */
  warnings: string[];
  /** The listing ended inside an item: whatever came after it is missing. */
  cut?: true;
}

export interface NftSnapshot {
  /** The kube-proxy tables found (ip and/or ip6); empty when kube-proxy is not in nftables mode. */
  tables: NftTable[];
  /** Per family, where the table came from ('nft -j list table ip kube-proxy', a bundle file). */
  sources: Partial<Record<'ip' | 'ip6', string>>;
  /** Families whose kube-proxy table does not exist (not an error: another proxy mode, or single-stack). */
  absent: ('ip' | 'ip6')[];
  /** Families whose listing failed, with the reason: their rules are unknown, not absent. */
  unreadable?: Partial<Record<'ip' | 'ip6', string>>;
  version?: string;
  warnings: string[];
}
