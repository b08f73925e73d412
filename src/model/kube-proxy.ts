// Names kube-proxy defines and every layer refers to.

/** kube-proxy's IPVS dummy device, where IPVS mode binds Service VIPs. */
export const KUBE_IPVS_IFNAME = 'kube-ipvs0';
