// IPVS real servers behind each Service port's LB VIP:port, local or remote:
// on an IPVS node, whether a VIP can answer from this node.
import { perServicePort } from '../../export/family.js';
import type { SvcPortLabels } from '../../export/state.js';
import type { IpvsSnapshot } from '../../kernel/types.js';
import { key, type Key } from '../../model/address-key.js';
import { labelsOf, type ServiceIndex } from '../service-index.js';
import type { Collector } from './collector.js';

type RealServersItem = { svc: SvcPortLabels; locality: 'local' | 'remote'; count: number };

export interface IpvsRealServersPart {
  ipvsRealServers: RealServersItem[];
}

export const ipvsRealServers: Collector<IpvsRealServersPart> = {
  families: [
    perServicePort<IpvsRealServersPart, RealServersItem>({
      name: 'clbprobe_ipvs_real_servers',
      help: 'IPVS real servers behind the LB VIP:port of a Service port, local (on this node) or remote.',
      type: 'gauge',
      items: (s) => s.ipvsRealServers,
      extra: [['locality', (x) => x.locality]],
      value: (x) => x.count,
    }),
  ],
  empty: () => ({ ipvsRealServers: [] }),
  filler: () => {
    // Rebuilt only when the index or the IPVS table change; no series on a node without IPVS.
    let cache: { index: ServiceIndex; ipvs: IpvsSnapshot | undefined; part: IpvsRealServersPart } | undefined;
    return ({ index, sources }) => {
      const ipvs = sources.value<IpvsSnapshot>('ipvs');
      if (cache?.index === index && cache.ipvs === ipvs) return cache.part;
      const list: RealServersItem[] = [];
      if (ipvs) {
        // Virtual servers by address|protocol|port: a lookup per LB ingress, not a scan of them all per Service.
        const vsByKey = new Map<Key, IpvsSnapshot['virtualServers']>();
        for (const v of ipvs.virtualServers) {
          if (v.address === undefined || typeof v.protocol !== 'string') continue; // fwmark services have no VIP:port
          const k = key(v.address, v.protocol, v.port);
          const at = vsByKey.get(k);
          if (at) at.push(v);
          else vsByKey.set(k, [v]);
        }
        for (const s of index.services) {
          let local = 0;
          let remote = 0;
          for (const ip of new Set(s.lbIngress.map((i) => i.ip))) {
            for (const v of vsByKey.get(key(ip, s.protocol, s.port)) ?? []) {
              for (const r of v.realServers) if (index.isLocal(r.address)) local++;
              else remote++;
            }
          }
          const svc = labelsOf(s);
          list.push({ svc, locality: 'local', count: local }, { svc, locality: 'remote', count: remote });
        }
      }
      cache = { index, ipvs, part: { ipvsRealServers: list } };
      return cache.part;
    };
  },
};
