/** Whether a source could be read, and if not, why (node_exporter style: each source reports itself). */
export interface SourceStatus {
  /** A source's name (src/source/list.ts), or a part one reports (nat reports ipset). */
  source: string;
  available: boolean;
  /** Why the source is unavailable or degraded (e.g. "IPVS: genl family not present in this kernel"). */
  reason?: string;
  /** No such datapath on this node (no IPVS in iptables mode), which is no failure; only with available=false. */
  notPresent?: boolean;
  /** Wall-clock milliseconds the read took. */
  durationMs?: number;
}
