// Names kube-proxy defines and every layer refers to.

/** kube-proxy's IPVS dummy device, where IPVS mode binds Service VIPs. */
export const KUBE_IPVS_IFNAME = 'kube-ipvs0';

/** kube-proxy's --proxy-mode values that program a datapath clbprobe reads (userspace and kernelspace are gone). */
export type ProxyMode = 'iptables' | 'ipvs' | 'nftables';
