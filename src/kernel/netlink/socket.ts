// A netlink socket: request/ACK, streaming dumps and multicast subscriptions,
// over the addon's non-blocking syscalls and the Node event loop.
import { constants as osConstants } from 'node:os';
import { isSyscallError } from '../../native/addon.js';
import { native } from '../../native/index.js';
import { type PollHandle, UV_READABLE } from '../../native/poll.js';
import {
  type KeepMessage,
  messageLength,
  type NetlinkMessage,
  NetlinkParseError,
  NLM_F_DUMP_INTR,
  NLMSG_DONE,
  NLMSG_ERROR,
  NLMSG_HDRLEN,
  NLMSG_NOOP,
  NLMSG_OVERRUN,
  readCString,
  splitMessages,
  walkAttrs,
} from './codec.js';

export const NETLINK_ROUTE = 0;
export const NETLINK_NETFILTER = 12;
export const NETLINK_GENERIC = 16;

const SOL_SOCKET = 1;
const SO_ATTACH_BPF = 50;
const SO_DETACH_BPF = 27;
const SO_RCVBUF = 8;
const SO_RCVBUFFORCE = 33;
const SOL_NETLINK = 270;
const NETLINK_ADD_MEMBERSHIP = 1;
const NETLINK_CAP_ACK = 10;
const NETLINK_EXT_ACK = 11;
const NLM_F_CAPPED = 0x100;
const NLM_F_ACK_TLVS = 0x200;
const NLMSGERR_ATTR_MSG = 1;

const ENOBUFS = osConstants.errno.ENOBUFS;
/** nlRecv's status says EAGAIN when it stopped because the queue was empty (not an error). */
const EAGAIN = osConstants.errno.EAGAIN;

const errnoNames = new Map<number, string>(Object.entries(osConstants.errno).map(([k, v]) => [v, k]));
export const errnoName = (n: number): string => errnoNames.get(n) ?? `errno ${n}`;

/** The kernel answered a request with an error (NLMSG_ERROR with a negative code). */
export class NetlinkError extends Error {
  constructor(
    readonly errno: number,
    readonly what: string,
    readonly kernelMessage?: string,
  ) {
    super(`${what}: ${errnoName(errno)}${kernelMessage ? ` (${kernelMessage})` : ''}`);
    this.name = 'NetlinkError';
  }
  get code(): string {
    return errnoName(this.errno);
  }
}

/** The socket's receive queue overflowed: messages were lost; state must be re-read. */
export class NetlinkOverflowError extends Error {
  constructor(what: string) {
    super(`${what}: receive queue overflowed (ENOBUFS), messages were lost`);
    this.name = 'NetlinkOverflowError';
  }
}

export interface SocketOptions {
  /** Path of a network namespace (e.g. /var/run/netns/NAME) to open the socket in. */
  netns?: string;
  /** Legacy multicast group bitmask for bind(). */
  groups?: number;
  /** Receive buffer in bytes; SO_RCVBUFFORCE is tried first (CAP_NET_ADMIN), then SO_RCVBUF. */
  rcvbuf?: number;
  /** Bytes of the receive batch buffer. */
  batchBytes?: number;
  /** Largest datagram expected: receiving goes on while this much room is left; a bigger one is reported. */
  maxDatagram?: number;
}

/** For sockets that only get notifications, which the kernel sends one per small skb (NLMSG_GOODSIZE). */
export const NOTIFICATION_BATCH = { batchBytes: 256 << 10, maxDatagram: 32 << 10 } as const;

export interface DumpResult {
  messages: number;
  /** NLM_F_DUMP_INTR: the table changed during the dump; the result may be inconsistent. */
  interrupted: boolean;
}

const MAX_BATCH_DATAGRAMS = 4096;

/** A socket that keeps receiving yields to the event loop after this long, since a big dump never drains. */
export const LOOP_SLICE_MS = 20;

/** Gets one reply message's payload as buf[start, end). */
type VisitMessage = (buf: Buffer, start: number, end: number, type: number, flags: number) => void;

/** What a dump of raw messages needs of a socket (NetlinkSocket; a replay of recorded datagrams in tests). */
export interface RawDumper {
  dumpRaw(msg: Buffer, what: string, visit: VisitMessage, afterBatch?: () => void | Promise<void>): Promise<DumpResult>;
  close(): void;
}

/**
 * Walks one datagram of a reply, visiting our messages and returning true at NLMSG_DONE (or the ACK, if `ackEnds`);
 * a header that does not fit throws NetlinkParseError, and a bad payload is visit's concern.
 */
export function walkDumpDatagram(
  buf: Buffer,
  off: number,
  dend: number,
  seq: number,
  port: number,
  what: string,
  res: DumpResult,
  visit: VisitMessage,
  ackEnds = false,
): boolean {
  let o = off;
  while (o < dend) {
    const len = messageLength(buf, o, dend);
    const at = o;
    o += (len + 3) & ~3;
    // A stray notification or someone else's reply.
    if (buf.readUInt32LE(at + 8) !== seq || buf.readUInt32LE(at + 12) !== port) continue;
    const type = buf.readUInt16LE(at + 4);
    const flags = buf.readUInt16LE(at + 6);
    if (flags & NLM_F_DUMP_INTR) res.interrupted = true;
    if (type === NLMSG_DONE) {
      // ctnetlink and others put an int error in DONE's payload.
      const payload = buf.subarray(at + NLMSG_HDRLEN, at + len);
      const err = payload.length >= 4 ? payload.readInt32LE(0) : 0;
      if (err < 0) throw new NetlinkError(-err, what, extAckMessage(payload, flags, 4));
      return true;
    }
    if (type === NLMSG_ERROR) {
      const { errno, message } = parseError({ payload: buf.subarray(at + NLMSG_HDRLEN, at + len), flags });
      if (errno !== 0) throw new NetlinkError(errno, what, message);
      if (ackEnds) return true;
      continue;
    }
    if (type === NLMSG_NOOP || type === NLMSG_OVERRUN) continue;
    res.messages++;
    visit(buf, at + NLMSG_HDRLEN, at + len, type, flags);
  }
  return false;
}

export class NetlinkSocket implements RawDumper {
  readonly fd: number;
  readonly port: number;
  /** Effective receive buffer, as the kernel reports it. */
  readonly rcvbuf: number;
  private seq = Math.floor(Math.random() * 0x7fffffff);
  private batch?: Buffer;
  private readonly batchBytes: number;
  private readonly maxDatagram: number;
  private readonly status = new Int32Array(2 + MAX_BATCH_DATAGRAMS);
  private poll: PollHandle | undefined;
  private wake: (() => void) | undefined;
  private subscriber: ((status: number) => void) | undefined;
  /** While set, a paced subscription is resting (subscribe's paceMs). */
  private paceTimer: NodeJS.Timeout | undefined;
  private busy: Promise<unknown> = Promise.resolve();
  private closed = false;

  private constructor(
    readonly protocol: number,
    opts: SocketOptions,
  ) {
    const n = native();
    this.fd = n.nlOpen(protocol, opts.netns);
    try {
      if (opts.rcvbuf) {
        try {
          n.nlSetsockopt(this.fd, SOL_SOCKET, SO_RCVBUFFORCE, opts.rcvbuf);
        } catch (e) {
          if (!isSyscallError(e) || e.code !== 'EPERM') throw e;
          n.nlSetsockopt(this.fd, SOL_SOCKET, SO_RCVBUF, opts.rcvbuf); // capped at net.core.rmem_max
        }
      }
      // Smaller, more useful error replies: header only, plus the kernel's message text.
      n.nlSetsockopt(this.fd, SOL_NETLINK, NETLINK_CAP_ACK, 1);
      n.nlSetsockopt(this.fd, SOL_NETLINK, NETLINK_EXT_ACK, 1);
      this.port = n.nlBind(this.fd, opts.groups ?? 0);
      this.rcvbuf = n.nlGetsockopt(this.fd, SOL_SOCKET, SO_RCVBUF);
    } catch (e) {
      n.nlClose(this.fd);
      throw e;
    }
    this.batchBytes = opts.batchBytes ?? 1 << 20;
    this.maxDatagram = opts.maxDatagram ?? 256 << 10;
  }

  static open(protocol: number, opts: SocketOptions = {}): NetlinkSocket {
    return new NetlinkSocket(protocol, opts);
  }

  private get buf(): Buffer {
    this.batch ??= Buffer.allocUnsafe(this.batchBytes);
    return this.batch;
  }

  /** Frees the receive buffer for a socket kept for rare dumps; call only between requests. */
  releaseBuffer(): void {
    this.batch = undefined;
  }

  /** Joins a multicast group (numbered, as in NETLINK_ADD_MEMBERSHIP). */
  addMembership(group: number): void {
    native().nlSetsockopt(this.fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group);
  }

  /** Sends a finished message after stamping a fresh sequence number; returns it. */
  private send(msg: Buffer): number {
    this.assertOpen();
    this.seq = (this.seq + 1) >>> 0 || 1;
    msg.writeUInt32LE(this.seq, 8);
    native().nlSend(this.fd, msg);
    return this.seq;
  }

  /**
   * Hands each batch of our reply messages (without DONE) to onBatch; messages are views valid only during
   * onBatch, which may return a promise for backpressure.
   */
  dump(msg: Buffer, what: string, onBatch: (msgs: NetlinkMessage[]) => void | Promise<void>): Promise<DumpResult> {
    let mine: NetlinkMessage[] = [];
    return this.dumpRaw(
      msg,
      what,
      (buf, start, end, type, flags) =>
        void mine.push({ type, flags, seq: this.seq, pid: this.port, payload: buf.subarray(start, end) }),
      () => {
        if (!mine.length) return;
        const batch = mine;
        mine = [];
        return onBatch(batch);
      },
    );
  }

  /**
   * dump() without message objects: visit gets each payload range in the receive buffer, valid only during the
   * call; afterBatch may return a promise for backpressure; `ackEnds`: a request's ACK ends it as DONE would.
   */
  dumpRaw(
    msg: Buffer,
    what: string,
    visit: VisitMessage,
    afterBatch?: () => void | Promise<void>,
    ackEnds = false,
  ): Promise<DumpResult> {
    return this.exclusive(async () => {
      const seq = this.send(msg);
      const res: DumpResult = { messages: 0, interrupted: false };
      const b = this.buf;
      for (;;) {
        const count = await this.receiveRaw(what);
        let done = false;
        let off = 0;
        for (let i = 0; i < count && !done; i++) {
          const dend = off + this.status[2 + i]!;
          done = walkDumpDatagram(b, off, dend, seq, this.port, what, res, visit, ackEnds);
          off = dend;
        }
        if (afterBatch) {
          const p = afterBatch();
          if (p) await p;
        }
        if (done) return res;
      }
    });
  }

  /** Sends a request expecting an ACK (send it with NLM_F_ACK); returns the replies before it. */
  async request(msg: Buffer, what: string): Promise<NetlinkMessage[]> {
    const replies: NetlinkMessage[] = [];
    // Copies: the receive buffer is reused by the next batch.
    const keep: VisitMessage = (buf, start, end, type, flags) =>
      void replies.push({ type, flags, seq: this.seq, pid: this.port, payload: Buffer.from(buf.subarray(start, end)) });
    await this.dumpRaw(msg, what, keep, undefined, true);
    return replies;
  }

  /**
   * Delivers multicast messages; onOverflow means the kernel dropped some (ENOBUFS) and the caller must resync.
   * paceMs rests the watcher after a drain so messages arrive in batches; the receive buffer must hold that long.
   */
  subscribe(
    onBatch: (msgs: NetlinkMessage[]) => void,
    onOverflow: () => void,
    onError?: (e: Error) => void,
    keep?: KeepMessage,
    paceMs = 0,
  ): () => void {
    this.assertOpen();
    if (this.subscriber) throw new Error('netlink: socket already has a subscriber');
    const n = native();
    const fail = onError ?? rethrow;
    const rest = (): void => {
      if (paceMs <= 0 || this.closed) return;
      n.pollSet(this.poll!, 0);
      this.paceTimer = setTimeout(() => {
        this.paceTimer = undefined;
        if (this.subscriber === drain && !this.closed) n.pollSet(this.poll!, UV_READABLE);
      }, paceMs);
    };
    const drain = (): void => {
      // Bounded work per wakeup so one busy socket cannot starve the loop; the level-triggered watcher fires again.
      for (let round = 0; round < 16 && !this.closed; round++) {
        const count = n.nlRecv(this.fd, this.buf, this.status, this.maxDatagram);
        const err = this.status[1]!;
        if (count > 0) {
          try {
            onBatch(this.parseBatch(count, keep));
          } catch (e) {
            fail(e as Error);
          }
        }
        if (err === ENOBUFS) {
          onOverflow();
          continue; // the queue still holds what arrived after the overflow
        }
        // Drained: one receive call per wakeup instead of a second one to find the queue empty.
        if (err === EAGAIN || count === 0) {
          rest();
          return;
        }
        if (err !== 0) {
          fail(new Error(`netlink receive: ${errnoName(err)}`));
          return;
        }
      }
    };
    this.subscriber = drain;
    this.ensurePoll();
    n.pollSet(this.poll!, UV_READABLE);
    return () => {
      this.subscriber = undefined;
      this.stopResting();
      if (this.poll && !this.closed) n.pollSet(this.poll, 0);
    };
  }

  /** Attaches a loaded socket-filter program: messages it drops, notifications included, are never queued. */
  attachBpf(progFd: number): void {
    this.assertOpen();
    native().nlSetsockopt(this.fd, SOL_SOCKET, SO_ATTACH_BPF, progFd);
  }

  detachBpf(): void {
    this.assertOpen();
    native().nlSetsockopt(this.fd, SOL_SOCKET, SO_DETACH_BPF, 0);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.stopResting();
    const n = native();
    if (this.poll) n.pollStop(this.poll);
    this.poll = undefined;
    n.nlClose(this.fd);
    this.wake?.();
  }

  private stopResting(): void {
    clearTimeout(this.paceTimer);
    this.paceTimer = undefined;
  }

  private assertOpen(): void {
    if (this.closed) throw new Error('netlink: socket is closed');
  }

  /** Serialises request/dump exchanges on this socket. */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.busy.then(fn, fn);
    this.busy = run.catch(() => undefined);
    return run;
  }

  private ensurePoll(): void {
    if (this.poll) return;
    this.poll = native().pollStart(this.fd, (status) => {
      const sub = this.subscriber;
      if (sub) {
        sub(status);
        // libuv stops watching after POLLERR (the ENOBUFS just read), so watch again or no later overflow is delivered.
        if (status < 0 && this.subscriber === sub && !this.closed && !this.paceTimer)
          native().pollSet(this.poll!, UV_READABLE);
        return;
      }
      // A request is waiting: pause the level-triggered watcher until the next wait.
      native().pollSet(this.poll!, 0);
      const w = this.wake;
      this.wake = undefined;
      w?.();
    });
  }

  private waitReadable(): Promise<void> {
    this.ensurePoll();
    return new Promise((resolve) => {
      this.wake = resolve;
      native().pollSet(this.poll!, UV_READABLE);
    });
  }

  /** When this socket last let the event loop run (performance.now()). */
  private turnAt = 0;

  /** Receives at least one datagram into buf; returns how many (their lengths are in status[2..]). */
  private async receiveRaw(what: string): Promise<number> {
    const n = native();
    if (performance.now() - this.turnAt > LOOP_SLICE_MS) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      this.turnAt = performance.now();
    }
    for (;;) {
      this.assertOpen();
      const count = n.nlRecv(this.fd, this.buf, this.status, this.maxDatagram);
      const err = this.status[1]!;
      if (count > 0) return count;
      if (err === ENOBUFS) throw new NetlinkOverflowError(what);
      if (err !== 0 && err !== EAGAIN) throw new NetlinkError(err, `${what}: receive`);
      await this.waitReadable();
      this.turnAt = performance.now();
    }
  }

  private parseBatch(count: number, keep?: KeepMessage): NetlinkMessage[] {
    const out: NetlinkMessage[] = [];
    let off = 0;
    for (let i = 0; i < count; i++) {
      const len = this.status[2 + i]!;
      for (const m of splitMessages(this.buf, off, off + len, keep)) out.push(m);
      off += len;
    }
    return out;
  }
}

function rethrow(err: Error): never {
  throw err;
}

/** NLMSG_ERROR: int error, the echoed request header (capped), then extended-ACK attributes. */
export function parseError({ payload, flags }: Pick<NetlinkMessage, 'payload' | 'flags'>): {
  errno: number;
  message?: string | undefined;
} {
  if (payload.length < 4) throw new NetlinkParseError('NLMSG_ERROR shorter than its error code', 0);
  const errno = -payload.readInt32LE(0);
  if (payload.length < 4 + NLMSG_HDRLEN) return { errno };
  // With NETLINK_CAP_ACK the echoed request is its header alone unless its length field says otherwise.
  const echoed = flags & NLM_F_CAPPED ? NLMSG_HDRLEN : (payload.readUInt32LE(4) + 3) & ~3;
  return { errno, message: extAckMessage(payload, flags, 4 + echoed) };
}

/** NLMSGERR_ATTR_MSG of an extended ACK whose attributes start at payload offset `from`. */
function extAckMessage(payload: Buffer, flags: number, from: number): string | undefined {
  if (!(flags & NLM_F_ACK_TLVS) || from >= payload.length) return undefined;
  let message: string | undefined;
  walkAttrs(payload, from, payload.length, (type, s, e) => {
    if (type === NLMSGERR_ATTR_MSG) message = readCString(payload, s, e);
  });
  return message;
}
