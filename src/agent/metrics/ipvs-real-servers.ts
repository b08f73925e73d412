// IPVS real servers behind each active port's LB VIP, local or remote; no series on a node without IPVS.
import type { IpvsSnapshot } from '../../kernel/types.js';
import { type Key, key } from '../../model/address-key.js';
import { families, perPort, type Scrape } from './collector.js';
import { PORT_LABELS } from './service-ports.js';

function realServers({ agent, servicePorts }: Scrape) {
  const ipvs = agent.sources.value<IpvsSnapshot>('ipvs');
  if (!ipvs || servicePorts.ports.length === 0) return [];
  const byVip = new Map<Key, IpvsSnapshot['virtualServers']>();
  for (const v of ipvs.virtualServers) {
    // fwmark services have no VIP:port
    if (v.address === undefined || typeof v.protocol !== 'string') continue;
    const k = key(v.address, v.protocol, v.port);
    byVip.set(k, [...(byVip.get(k) ?? []), v]);
  }
  return perPort({ agent, servicePorts }, 'locality', ({ view }) => {
    if (!view) return [];
    let local = 0;
    let remote = 0;
    for (const ip of new Set(view.lbIngress.map((i) => i.ip))) {
      for (const v of byVip.get(key(ip, view.protocol, view.port)) ?? []) {
        for (const r of v.realServers) {
          if (agent.index.isLocal(r.address)) local++;
          else remote++;
        }
      }
    }
    return [
      ['local', local],
      ['remote', remote],
    ];
  });
}

export const ipvsRealServers = families({
  type: 'gauge',
  name: 'clbprobe_ipvs_real_servers',
  help: 'IPVS real servers behind the LB VIP:port of an active Service port, local (on this node) or remote.',
  labelNames: [...PORT_LABELS, 'locality'],
  samples: realServers,
});
