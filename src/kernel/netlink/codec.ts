// Netlink wire format: message headers and attributes (TLVs). Headers are host byte order (little-endian on every
// platform shipped for), while ctnetlink and IPVS carry big-endian integers, so readers choose explicitly.

export const NLMSG_HDRLEN = 16;
export const NLA_HDRLEN = 4;
/** Attribute type bits; the top two are NLA_F_NESTED and NLA_F_NET_BYTEORDER. */
export const NLA_TYPE_MASK = 0x3fff;
export const NLA_F_NESTED = 0x8000;
export const NLA_F_NET_BYTEORDER = 0x4000;

export const NLMSG_NOOP = 1;
export const NLMSG_ERROR = 2;
export const NLMSG_DONE = 3;
export const NLMSG_OVERRUN = 4;

export const NLM_F_REQUEST = 0x1;
export const NLM_F_ACK = 0x4;
export const NLM_F_DUMP_INTR = 0x10;
export const NLM_F_ROOT = 0x100;
export const NLM_F_MATCH = 0x200;
export const NLM_F_DUMP = NLM_F_ROOT | NLM_F_MATCH;
export const NLM_F_CREATE = 0x400;
export const NLM_F_EXCL = 0x200;

export const align4 = (n: number): number => (n + 3) & ~3;

/** Malformed netlink data: names what was wrong and where, never a crash deep inside. */
export class NetlinkParseError extends Error {
  constructor(
    message: string,
    readonly offset: number,
  ) {
    super(`netlink: ${message} (at byte ${offset})`);
    this.name = 'NetlinkParseError';
  }
}

/** One netlink message; payload is a view into the receive buffer, valid until the next receive. */
export interface NetlinkMessage {
  type: number;
  flags: number;
  seq: number;
  pid: number;
  payload: Buffer;
}

/** A pre-check on a message's raw payload before any object is made for it; false drops it. */
export type KeepMessage = (buf: Buffer, start: number, end: number, type: number) => boolean;

/** The length of the message at buf[off], once its header is known to fit before `end`; else NetlinkParseError. */
export function messageLength(buf: Buffer, off: number, end: number): number {
  if (end - off < NLMSG_HDRLEN) throw new NetlinkParseError(`truncated header: ${end - off} bytes left`, off);
  const len = buf.readUInt32LE(off);
  if (len < NLMSG_HDRLEN || off + len > end) {
    throw new NetlinkParseError(`message length ${len} does not fit the ${end - off} bytes left`, off);
  }
  return len;
}

/**
 * Splits one datagram into messages (those `keep` accepts, when given). Throws NetlinkParseError on a header that
 * claims more bytes than the datagram holds (a truncated or corrupt reply).
 */
export function splitMessages(buf: Buffer, start = 0, end = buf.length, keep?: KeepMessage): NetlinkMessage[] {
  const out: NetlinkMessage[] = [];
  let off = start;
  while (off < end) {
    const len = messageLength(buf, off, end);
    const type = buf.readUInt16LE(off + 4);
    if (keep && !keep(buf, off + NLMSG_HDRLEN, off + len, type)) {
      off += align4(len);
      continue;
    }
    out.push({
      type,
      flags: buf.readUInt16LE(off + 6),
      seq: buf.readUInt32LE(off + 8),
      pid: buf.readUInt32LE(off + 12),
      payload: buf.subarray(off + NLMSG_HDRLEN, off + len),
    });
    off += align4(len);
  }
  return out;
}

/**
 * A bounds-checked, resettable cursor over attributes in [start, end) for hot paths; it throws NetlinkParseError
 * on an attribute past the end (at its offset from `base`), and fewer than 4 trailing bytes are padding.
 */
export class AttrCursor {
  type = 0;
  vs = 0;
  ve = 0;
  private off = 0;
  private end = 0;
  private base = 0;
  /** `what` names the attributes in errors ('conntrack attribute'). */
  constructor(private readonly what = 'attribute') {}

  reset(start: number, end: number, base = 0): this {
    this.off = start;
    this.end = end;
    this.base = base;
    return this;
  }

  next(buf: Buffer): boolean {
    const o = this.off;
    if (o + NLA_HDRLEN > this.end) return false;
    const len = buf[o]! | (buf[o + 1]! << 8);
    this.type = (buf[o + 2]! | (buf[o + 3]! << 8)) & NLA_TYPE_MASK;
    if (len < NLA_HDRLEN || o + len > this.end) {
      throw new NetlinkParseError(`${this.what} type ${this.type} length ${len} overruns its container`, o - this.base);
    }
    this.vs = o + NLA_HDRLEN;
    this.ve = o + len;
    this.off = o + align4(len);
    return true;
  }
}

/** Calls fn(type without flag bits, start, end) per attribute; throws NetlinkParseError past the end. */
export function walkAttrs(
  buf: Buffer,
  start: number,
  end: number,
  fn: (type: number, vstart: number, vend: number) => void,
): void {
  const a = new AttrCursor().reset(start, end);
  while (a.next(buf)) fn(a.type, a.vs, a.ve);
}

/** Attributes by type (last one wins), as [start, end) ranges into buf. */
export function attrTable(buf: Buffer, start: number, end: number): Map<number, [number, number]> {
  const t = new Map<number, [number, number]>();
  walkAttrs(buf, start, end, (type, s, e) => t.set(type, [s, e]));
  return t;
}

export function needLen(have: number, want: number, what: string, off: number): void {
  if (have < want) throw new NetlinkParseError(`${what}: ${have} bytes, need ${want}`, off);
}

/** NUL-terminated string attribute value. */
export function readCString(buf: Buffer, start: number, end: number): string {
  let e = start;
  while (e < end && buf[e] !== 0) e++;
  return buf.toString('utf8', start, e);
}

/** Growable writer for requests: header + family header + attributes (nested supported). */
export class MessageWriter {
  private buf = Buffer.alloc(256);
  private len = 0;
  private readonly nests: number[] = [];

  constructor(type: number, flags: number) {
    this.u32(0); // length, patched in finish()
    this.u16(type);
    this.u16(flags);
    this.u32(0); // seq, set by the socket
    this.u32(0); // pid: 0, the kernel fills in our port
  }

  private ensure(n: number): void {
    if (this.len + n <= this.buf.length) return;
    const next = Buffer.alloc(Math.max(this.buf.length * 2, this.len + n));
    this.buf.copy(next, 0, 0, this.len);
    this.buf = next;
  }
  /** Appends n bytes that write() puts at offset `at`. */
  private put(n: number, write: (at: number) => void): this {
    this.ensure(n);
    write(this.len);
    this.len += n;
    return this;
  }
  u8(v: number): this {
    return this.put(1, (at) => this.buf.writeUInt8(v, at));
  }
  u16(v: number): this {
    return this.put(2, (at) => this.buf.writeUInt16LE(v, at));
  }
  u32(v: number): this {
    return this.put(4, (at) => this.buf.writeUInt32LE(v >>> 0, at));
  }
  bytes(data: Uint8Array): this {
    return this.put(data.length, (at) => this.buf.set(data, at));
  }
  pad(): this {
    const n = align4(this.len) - this.len;
    return this.put(n, (at) => this.buf.fill(0, at, at + n));
  }
  attr(type: number, value: Uint8Array): this {
    this.u16(NLA_HDRLEN + value.length)
      .u16(type)
      .bytes(value);
    return this.pad();
  }
  attrU8(type: number, v: number): this {
    return this.attr(type, Uint8Array.of(v & 0xff));
  }
  attrU16(type: number, v: number): this {
    const b = Buffer.alloc(2);
    b.writeUInt16LE(v);
    return this.attr(type, b);
  }
  attrU16be(type: number, v: number): this {
    const b = Buffer.alloc(2);
    b.writeUInt16BE(v);
    return this.attr(type, b);
  }
  attrU32(type: number, v: number): this {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v >>> 0);
    return this.attr(type, b);
  }
  attrU32be(type: number, v: number): this {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(v >>> 0);
    return this.attr(type, b);
  }
  attrString(type: number, s: string): this {
    return this.attr(type, Buffer.from(`${s}\0`, 'utf8'));
  }
  beginNested(type: number): this {
    this.nests.push(this.len);
    return this.u16(0).u16(type | NLA_F_NESTED);
  }
  endNested(): this {
    const at = this.nests.pop();
    if (at === undefined) throw new Error('MessageWriter: endNested without beginNested');
    this.buf.writeUInt16LE(this.len - at, at);
    return this;
  }
  /** The finished message with its length set; seq is patched by the socket. */
  finish(): Buffer {
    if (this.nests.length) throw new Error('MessageWriter: unclosed nested attribute');
    this.buf.writeUInt32LE(this.len, 0);
    return Buffer.from(this.buf.subarray(0, this.len));
  }
}
