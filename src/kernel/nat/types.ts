// Typed form of iptables-save, ip6tables-save and `ipset save` output; rules keep their spec as written so
// evidence quotes the kernel's own text, and the parsed matches serve src/kubeproxy/facts.ts.

import type { IpFamily } from '../../model/address-family.js';

export type NatFamily = IpFamily;
export type XtablesBackend = 'legacy' | 'nft';

/** One option of a match or of the base rule, e.g. `! -s 10.0.0.0/8` or `--dport 80`. */
export interface MatchOption {
  /** As written: '-s', '-d', '-p', '-i', '-o', '-f', '--dport', '--match-set', ... */
  name: string;
  negated: boolean;
  /** Arguments after the option name (`--match-set KUBE-X dst,dst` has two). */
  values: string[];
}

/** A match module (`-m tcp --dport 80`); module '' holds the base options (-s -d -p -i -o -f). */
export interface RuleMatch {
  module: string;
  options: MatchOption[];
}

export interface IptablesRule {
  table: string;
  chain: string;
  /** Everything after `-A CHAIN `, exactly as the save output wrote it. */
  spec: string;
  /** Jump (-j) or goto (-g) target; undefined for rules that only count or comment. */
  target?: string;
  goto: boolean;
  /** Target options as written, e.g. ['--to-destination', '10.244.1.5:8080']. */
  targetArgs: string[];
  /** Text of `-m comment --comment`, unquoted and unescaped. */
  comment?: string;
  matches: RuleMatch[];
  /** `[packets:bytes]` when the save output carried counters (-c). */
  counters?: { packets: number; bytes: number };
  /** 1-based line in the save output. */
  line: number;
}

export interface IptablesChain {
  name: string;
  /** Built-in chains carry a policy (ACCEPT/DROP); user chains print '-'. */
  policy?: string;
  builtin: boolean;
  counters?: { packets: number; bytes: number };
  line: number;
}

export interface IptablesTable {
  name: string;
  chains: IptablesChain[];
  rules: IptablesRule[];
  /** False when the input ended before this table's COMMIT (truncated capture). */
  committed: boolean;
  line: number;
}

export interface IptablesDump {
  family: NatFamily;
  /** Name of the input (command or file) used in warnings and evidence. */
  source: string;
  tables: IptablesTable[];
  warnings: string[];
}

export interface IpsetMember {
  /** The element as written: '192.0.2.10,tcp:80', '30080', '10.0.0.0/8'. */
  entry: string;
  /** Per-element options: timeout, packets, bytes, comment, skbmark, ... */
  options: Record<string, string>;
}

export interface IpsetSet {
  name: string;
  /** 'hash:ip,port', 'bitmap:port', ... */
  type: string;
  /** From the header's `family`; bitmap:port sets have none. */
  family?: 'inet' | 'inet6';
  /** Header options other than family (hashsize, maxelem, range, initval, comment, ...). Flags map to ''. */
  options: Record<string, string>;
  members: IpsetMember[];
  line: number;
}

export interface IpsetDump {
  source: string;
  sets: IpsetSet[];
  warnings: string[];
}

export interface BackendEvidence {
  /** Rule lines (starting with '-') over both families. */
  ruleLines: number;
  /** Rule lines mentioning a KUBE-* chain. */
  kubeRuleLines: number;
  /** Whether a KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY chain exists (kubelet >= 1.17). */
  kubeletChains: boolean;
  /** Why this backend could not be read, if it could not. */
  error?: string;
}

export interface BackendChoice {
  backend: XtablesBackend;
  /** One sentence, e.g. "nft: KUBE-IPTABLES-HINT chain found in iptables-nft-save output". */
  reason: string;
  legacy: BackendEvidence;
  nft: BackendEvidence;
}

export interface NatSnapshot {
  backend: XtablesBackend;
  backendChoice: BackendChoice;
  /** iptables-save of the chosen backend. */
  v4?: IptablesDump;
  /** ip6tables-save of the chosen backend. */
  v6?: IptablesDump;
  /** `ipset save`; undefined when ipset could not be read. */
  ipsets?: IpsetDump;
  /** Families whose save command failed, with the reason: their rules are unknown, not absent. */
  unreadable?: Partial<Record<NatFamily, string>>;
  /** Reader-level warnings (e.g. the other backend also holds KUBE rules). */
  warnings: string[];
}
