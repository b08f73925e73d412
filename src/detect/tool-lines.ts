// Evidence lines in the forms SREs know: conntrack -L for entries, ipvsadm -Ln for IPVS virtual servers.

import { slicePort } from '../cluster/endpoints.js';
import type { ServiceView } from '../cluster/types.js';
import { forwardName } from '../kernel/ipvs/uapi.js';
import type { IpvsVirtualServer } from '../kernel/types.js';
import type { FindingOf, Severity } from './core-types.js';

export function hostPort(ip: string, port: number | undefined): string {
  const h = ip.includes(':') ? `[${ip}]` : ip;
  return port === undefined ? h : `${h}:${port}`;
}

/** A virtual server and its real servers as `ipvsadm -Ln` prints them. */
export function formatIpvs(vs: IpvsVirtualServer): string[] {
  const head =
    vs.fwmark !== undefined
      ? `FWM  ${vs.fwmark}`
      : `${String(vs.protocol).padEnd(4)} ${hostPort(vs.address ?? '?', vs.port)}`;
  const lines = [`IPVS ${head} ${vs.scheduler}${vs.flags.includes('persistent') ? ` persistent ${vs.timeoutS}` : ''}`];
  if (vs.realServers.length === 0) lines.push('IPVS   (no real servers)');
  for (const rs of vs.realServers) {
    const forward = typeof rs.forward === 'number' ? rs.forward : forwardName(rs.forward);
    lines.push(
      `IPVS   -> ${hostPort(rs.address, rs.port)}  ${forward} ${rs.weight} ${rs.activeConns} ${rs.inactiveConns}`,
    );
  }
  return lines;
}

/** The first `max` items joined, and how many more there are. */
export function firstOf(items: string[], max: number): string {
  return items.length > max ? `${items.slice(0, max).join(', ')} and ${items.length - max} more` : items.join(', ');
}

export function finding<M extends string>(
  s: ServiceView,
  mechanism: M,
  severity: Severity,
  { summary, evidence, remedy }: Pick<FindingOf<M>, 'summary' | 'evidence' | 'remedy'>,
): FindingOf<M> {
  return {
    service: { namespace: s.namespace, name: s.name },
    port: { port: s.port, protocol: s.protocol, name: s.portName },
    mechanism,
    severity,
    summary,
    evidence,
    remedy,
  };
}

export function endpointsLine(service: ServiceView): string {
  const local = service.endpoints.filter((e) => e.local).map((e) => hostPort(e.address, slicePort(service, e)));
  const remote = service.endpoints.filter((e) => !e.local).length;
  return (
    `endpoints: ${local.length} local (${local.join(', ') || 'none'}), ${remote} ` +
    `on other nodes; externalTrafficPolicy=${service.externalTrafficPolicy}`
  );
}
