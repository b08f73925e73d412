// How much the agent follows: the LB Service ports in its index and the
// conntrack entries it keeps (those touching one of them). Its memory and its
// scrape size grow with these two; an alert on RSS reads better beside them.
import { plain } from '../../export/family.js';
import type { Collector } from './collector.js';

export interface FollowedPart {
  followed: { servicePorts: number; conntrackEntries: number };
}

export const followed: Collector<FollowedPart> = {
  families: [
    plain<FollowedPart, FollowedPart['followed']>({
      name: 'clbprobe_service_ports_followed',
      help: 'Service ports with an LB ingress IP or behind an Ingress VIP, which the agent follows.',
      type: 'gauge',
      labelNames: [],
      items: (s) => [s.followed],
      key: () => '',
      labels: () => '',
      value: (x) => x.servicePorts,
    }),
    plain<FollowedPart, FollowedPart['followed']>({
      name: 'clbprobe_conntrack_entries_kept',
      help: 'Conntrack entries the agent keeps: those towards, or back from, a followed Service port.',
      type: 'gauge',
      labelNames: [],
      items: (s) => [s.followed],
      key: () => '',
      labels: () => '',
      value: (x) => x.conntrackEntries,
    }),
  ],
  empty: () => ({ followed: { servicePorts: 0, conntrackEntries: 0 } }),
  filler: () => {
    const followed = { servicePorts: 0, conntrackEntries: 0 };
    return ({ index, table }) => {
      followed.servicePorts = index.services.length;
      followed.conntrackEntries = table.size;
      return { followed };
    };
  },
};
