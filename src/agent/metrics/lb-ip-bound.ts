// Whether each LB ingress IP of a Service port is bound on kube-ipvs0 on this
// node: the Service index (built from the node's addresses) says.
import { perServicePort } from '../../export/family.js';
import type { SvcPortLabels } from '../../export/state.js';
import type { AddressSnapshot } from '../../kernel/types.js';
import { labelsOf, type ServiceIndex } from '../service-index.js';
import type { Collector } from './collector.js';

type BoundItem = { svc: SvcPortLabels; ip: string; bound: boolean };

export interface LbIpBoundPart {
  lbIpBound: BoundItem[];
}

export const lbIpBound: Collector<LbIpBoundPart> = {
  families: [
    perServicePort<LbIpBoundPart, BoundItem>({
      name: 'clbprobe_lb_ip_bound',
      help: 'Whether the LB ingress IP of a Service port is bound on kube-ipvs0 on this node.',
      type: 'gauge',
      items: (s) => s.lbIpBound,
      extra: [['ip', (x) => x.ip]],
      value: (x) => (x.bound ? 1 : 0),
    }),
  ],
  empty: () => ({ lbIpBound: [] }),
  filler: () => {
    // Rebuilt only when the index or the addresses change. Without addresses nothing is known
    // about binding: no series rather than a 0.
    let cache: { index: ServiceIndex; addresses: AddressSnapshot | undefined; part: LbIpBoundPart } | undefined;
    return ({ index, sources }) => {
      const addresses = sources.value<AddressSnapshot>('addresses');
      if (cache?.index === index && cache.addresses === addresses) return cache.part;
      const list: BoundItem[] = [];
      if (addresses) for (const s of index.services) for (const i of s.lbIngress) list.push({ svc: labelsOf(s), ip: i.ip, bound: index.isIpvsBound(i.ip) });
      cache = { index, addresses, part: { lbIpBound: list } };
      return cache.part;
    };
  },
};
