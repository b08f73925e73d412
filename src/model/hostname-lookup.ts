/** What this node's resolver said for one hostname-only LB name (cluster/dns/hostname-cache.ts; the dns source). */
export interface HostnameLookup {
  hostname: string;
  /** The addresses the name resolved to (with `error`: the stale ones of an earlier answer). */
  addresses: string[];
  /** The answer's shortest TTL, seconds. */
  ttlS?: number;
  /** ISO time of the last good answer. */
  resolvedAt?: string;
  /** Why the last lookup failed. */
  error?: string;
  /** The resolver asked, e.g. "nameserver 10.96.0.10 (/etc/resolv.conf)". */
  resolver: string;
}
