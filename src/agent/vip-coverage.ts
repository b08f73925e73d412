// Which LB VIP:ports the last full conntrack read looked for. Between full reads the table
// follows the kernel's events, which only tell of connections that change: a VIP that joins
// the index later (the cluster view arrived after the first dump because the API server was
// slow or away, a new LB address, a hostname-only LB's new DNS answer) has connections the
// table has never seen, until the next full read. The agent reads again when this says so.
import type { PrefilterTargets } from '../kernel/conntrack/prefilter.js';
import { key, type Key } from '../model/address-key.js';
import { protocolOfNumber } from '../model/protocol.js';

type Vip = PrefilterTargets['vips'][number];
const keyOf = (v: Vip): Key => key(v.address, protocolOfNumber(v.protoNum) ?? String(v.protoNum), v.port);

export class VipCoverage {
  private covered = new Set<Key>();

  /** A full read starts with these targets. */
  readFor(vips: readonly Vip[]): void {
    this.covered = new Set(vips.map(keyOf));
  }

  /** Whether these VIPs hold one the last full read did not look for. */
  misses(vips: readonly Vip[]): boolean {
    return vips.some((v) => !this.covered.has(keyOf(v)));
  }
}
