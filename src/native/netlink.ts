// Bindings of native/netlink.c: netlink sockets, syscalls only.

export interface NetlinkAddon {
  nlOpen(protocol: number, netnsPath?: string): number;
  nlBind(fd: number, groups: number): number;
  nlSetsockopt(fd: number, level: number, optname: number, value: number): void;
  nlGetsockopt(fd: number, level: number, optname: number): number;
  nlSend(fd: number, buf: Uint8Array): number;
  /**
   * status[0]=count, status[1]=errno that ended the batch (EAGAIN: the queue is empty; 0: the
   * buffer or the count was full, more may wait), status[2+i]=length of datagram i.
   */
  nlRecv(fd: number, buf: Uint8Array, status: Int32Array, maxDatagram?: number): number;
  nlClose(fd: number): void;
}
