/** Whether a source could be read, and if not, why (node_exporter style: each source reports itself). */
export interface SourceStatus {
  /** A source's name (src/source/list.ts), or a part one reports (nat reports ipset). */
  source: string;
  available: boolean;
  /** Why the source is unavailable or degraded (e.g. "IPVS: genl family not present in this kernel"). */
  reason?: string;
  /**
   * The node has no such datapath at all (e.g. no IPVS in an iptables-mode cluster): nothing to
   * read, which is not a failure. Only set together with available=false.
   */
  notPresent?: boolean;
  /** Wall-clock milliseconds the read took. */
  durationMs?: number;
}
