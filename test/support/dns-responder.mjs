// A small authoritative DNS responder for the lab tests, run inside a test
// namespace: `node dns-responder.mjs ZONE.json ADDRESS` answers UDP queries on
// ADDRESS:53 from ZONE.json, re-read at every query so a test can change the
// answers (and their TTLs) while the agent runs. Each name's entry:
//   { "A": [["10.0.0.1", 30]], "AAAA": [["fd00::1", 30]] }   records with TTLs
//   { "rcode": 2 }                                          SERVFAIL (3: NXDOMAIN)
//   { "mode": "drop" | "truncated" | "garbage" | "cut" }   no answer; TC bit without
//      records (UDP only here: the TCP retry is refused); random bytes after the
//      query id; a well-formed answer cut in the middle of its first record.
// Unknown names get NXDOMAIN. Wire format per RFC 1035 (answers name the
// question by a compression pointer, as servers do). Prints "up" when bound.
import { createSocket } from 'node:dgram';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isIPv4, isIPv6 } from 'node:net';

const [zoneFile, address] = process.argv.slice(2);
const TYPES = { 1: 'A', 28: 'AAAA' };

function question(msg) {
  let off = 12;
  const labels = [];
  while (off < msg.length && msg[off] !== 0) {
    const len = msg[off];
    labels.push(msg.subarray(off + 1, off + 1 + len).toString('ascii'));
    off += 1 + len;
  }
  const end = off + 5; // zero byte, qtype, qclass
  return { name: labels.join('.').toLowerCase(), qtype: msg.readUInt16BE(off + 1), raw: msg.subarray(12, end) };
}

function rdata(type, ip) {
  if (type === 'A' && isIPv4(ip)) return Buffer.from(ip.split('.').map(Number));
  if (type === 'AAAA' && isIPv6(ip)) {
    const [head, tail = ''] = ip.split('::');
    const h = head ? head.split(':') : [];
    const t = tail ? tail.split(':') : [];
    const groups = ip.includes('::') ? [...h, ...Array(8 - h.length - t.length).fill('0'), ...t] : h;
    const b = Buffer.alloc(16);
    groups.forEach((g, i) => b.writeUInt16BE(parseInt(g, 16), i * 2));
    return b;
  }
  throw new Error(`bad ${type} record ${ip}`);
}

function answer(msg, zone) {
  const q = question(msg);
  const entry = zone[q.name];
  const header = Buffer.alloc(12);
  msg.copy(header, 0, 0, 2);
  const rd = msg[2] & 0x01;
  const flags = (rcode, tc = 0) => 0x8400 | (tc << 9) | (rd << 8) | 0x0080 | rcode; // QR AA (TC) RD RA
  if (!entry) {
    header.writeUInt16BE(flags(3), 2);
    header.writeUInt16BE(1, 4);
    return Buffer.concat([header, q.raw]);
  }
  if (entry.mode === 'drop') return undefined;
  if (entry.mode === 'garbage') return Buffer.concat([msg.subarray(0, 2), randomBytes(40)]);
  if (entry.mode === 'truncated') {
    header.writeUInt16BE(flags(0, 1), 2);
    header.writeUInt16BE(1, 4);
    return Buffer.concat([header, q.raw]);
  }
  header.writeUInt16BE(flags(entry.rcode ?? 0), 2);
  header.writeUInt16BE(1, 4);
  const type = TYPES[q.qtype];
  const records = (type && entry[type]) || [];
  header.writeUInt16BE(records.length, 6);
  const rrs = records.map(([ip, ttl]) => {
    const data = rdata(type, ip);
    const rr = Buffer.alloc(12);
    rr.writeUInt16BE(0xc00c, 0);
    rr.writeUInt16BE(q.qtype, 2);
    rr.writeUInt16BE(1, 4);
    rr.writeUInt32BE(ttl, 6);
    rr.writeUInt16BE(data.length, 10);
    return Buffer.concat([rr, data]);
  });
  const full = Buffer.concat([header, q.raw, ...rrs]);
  return entry.mode === 'cut' && rrs.length > 0 ? full.subarray(0, 12 + q.raw.length + 7) : full;
}

const sock = createSocket(isIPv6(address) ? 'udp6' : 'udp4');
sock.on('message', (msg, rinfo) => {
  if (msg.length < 17) return;
  let reply;
  try {
    reply = answer(msg, JSON.parse(readFileSync(zoneFile, 'utf8')));
  } catch (e) {
    process.stderr.write(`dns-responder: ${e.message}\n`);
    return;
  }
  if (reply) sock.send(reply, rinfo.port, rinfo.address);
});
sock.bind(53, address, () => console.log('up'));
