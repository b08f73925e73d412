// IPVS real servers behind each active port's LB VIP, local or remote; no series on a node without IPVS.
import { Gauge } from 'prom-client';
import type { IpvsSnapshot } from '../../kernel/types.js';
import { type Key, key } from '../../model/address-key.js';
import type { Collector } from './collector.js';
import { PORT_LABELS } from './service-ports.js';

export const ipvsRealServers: Collector = {
  register(registry, scrape) {
    new Gauge({
      name: 'clbprobe_ipvs_real_servers',
      help: 'IPVS real servers behind the LB VIP:port of an active Service port, local (on this node) or remote.',
      labelNames: [...PORT_LABELS, 'locality'],
      registers: [registry],
      collect() {
        this.reset();
        const { agent, servicePorts } = scrape();
        const ipvs = agent.sources.value<IpvsSnapshot>('ipvs');
        if (!ipvs || servicePorts.ports.length === 0) return;
        const byVip = new Map<Key, IpvsSnapshot['virtualServers']>();
        for (const v of ipvs.virtualServers) {
          // fwmark services have no VIP:port
          if (v.address === undefined || typeof v.protocol !== 'string') continue;
          const k = key(v.address, v.protocol, v.port);
          byVip.set(k, [...(byVip.get(k) ?? []), v]);
        }
        for (const { view, labels } of servicePorts.ports) {
          if (!view) continue;
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
          this.set({ ...labels, locality: 'local' }, local);
          this.set({ ...labels, locality: 'remote' }, remote);
        }
      },
    });
  },
};
