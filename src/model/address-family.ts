// IP address families: as clbprobe spells them (4, 6) and as the kernel numbers
// them in netlink messages (rtnetlink, ctnetlink, IPVS generic netlink).

/** IPv4 or IPv6. */
export type IpFamily = 4 | 6;

/** linux/socket.h */
export const AF_INET = 2;
export const AF_INET6 = 10;

/** The family of a kernel AF_* number; undefined for any other. */
export function familyOfAf(af: number): IpFamily | undefined {
  return af === AF_INET ? 4 : af === AF_INET6 ? 6 : undefined;
}

/** The kernel's AF_* number of a family. */
export function afOf(family: IpFamily): number {
  return family === 4 ? AF_INET : AF_INET6;
}
