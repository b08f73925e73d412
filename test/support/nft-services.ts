// The Services of the nftables lab and its captured fixtures: one per case the
// diagnosis tells apart on an nftables node.
import type { NftEndpoint, NftService } from './kube-nft.js';
import { NFT_LAB as L } from './nft-lab.js';

const ep = (ip: string, local: boolean, port: number = L.epPort): NftEndpoint => ({ ip, port, local });

function svc(name: string, n: number, etp: 'Local' | 'Cluster', endpoints: NftEndpoint[], vip = true): NftService {
  return {
    namespace: 'shop',
    name,
    portName: 'http',
    protocol: 'tcp',
    clusterIP: `10.96.0.${n}`,
    port: 80,
    nodePort: 30000 + n,
    // ipMode Proxy: kube-proxy leaves the LB IP out of its maps.
    lbIPs: vip ? [`203.0.113.${n}`] : [],
    etp,
    endpoints,
  };
}

/** LB IP 203.0.113.N for Service N; the ipMode Proxy one is not in kube-proxy's maps. */
export const LAB_SERVICES: NftService[] = [
  svc('web', 10, 'Cluster', [ep(L.remoteEp, false)]),
  svc('api', 11, 'Local', [ep(L.localEp, true)]),
  svc('far', 12, 'Local', [ep(L.remoteEp, false)]),
  svc('none', 13, 'Cluster', []),
  svc('proxy', 14, 'Cluster', [ep(L.remoteEp, false)], false),
  { ...svc('ranged', 15, 'Cluster', [ep(L.remoteEp, false)]), sourceRanges: ['198.51.100.0/24'] },
];

export const LAB_SERVICES_V6: NftService[] = [
  { ...svc('web', 10, 'Cluster', [ep('fd00:10:244:2::5', false)]), clusterIP: 'fd00:10:96::10', lbIPs: ['2001:db8:113::10'] },
  { ...svc('far', 12, 'Local', [ep('fd00:10:244:2::5', false)]), clusterIP: 'fd00:10:96::12', lbIPs: ['2001:db8:113::12'] },
];
