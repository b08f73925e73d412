// IP address families as clbprobe spells them (4, 6) and as netlink numbers them (rtnetlink, ctnetlink, IPVS).

export type IpFamily = 4 | 6;

/** linux/socket.h */
export const AF_INET = 2;
export const AF_INET6 = 10;
