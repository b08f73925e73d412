// Guest half of test/vm/api-bridge.ts: listens on 127.0.0.1:PORT inside the
// VM and carries every accepted TCP connection over the one virtio-serial port
// DEVICE to the host half, which opens the matching connection to the host's
// API server. A serial port is one byte stream that cannot say "closed", so
// connections are multiplexed in frames: type (1 byte), connection id (4),
// payload length (4), payload. Types: 1 open (guest to host), 2 data, 3 close.
// Usage: node api-bridge-guest.mjs DEVICE PORT; prints "ready" once listening.
import { openSync, read, write } from 'node:fs';
import { createServer } from 'node:net';

const [device, port] = process.argv.slice(2);
const OPEN = 1;
const DATA = 2;
const CLOSE = 3;
// A virtio-serial port can be open once only: one read/write descriptor, blocking reads in libuv's pool.
const fd = openSync(device, 'r+');
const conns = new Map();
let nextId = 1;

// Writes are chained so frames never interleave; a short write continues where it stopped.
let writing = Promise.resolve();
function send(type, id, payload = Buffer.alloc(0)) {
  const head = Buffer.alloc(9);
  head.writeUInt8(type, 0);
  head.writeUInt32BE(id, 1);
  head.writeUInt32BE(payload.length, 5);
  const frame = Buffer.concat([head, payload]);
  writing = writing.then(async () => {
    for (let off = 0; off < frame.length; ) {
      off += await new Promise((resolve, reject) => write(fd, frame, off, frame.length - off, null, (e, n) => (e ? reject(e) : resolve(n))));
    }
  }).catch((e) => fatal(`write ${device}: ${e.message}`));
}

function fatal(msg) {
  process.stderr.write(`api-bridge-guest: ${msg}\n`);
  process.exit(1);
}

let pending = Buffer.alloc(0);
function onBytes(chunk) {
  pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
  while (pending.length >= 9) {
    const len = pending.readUInt32BE(5);
    if (pending.length < 9 + len) break;
    const type = pending.readUInt8(0);
    const c = conns.get(pending.readUInt32BE(1));
    const payload = pending.subarray(9, 9 + len);
    pending = pending.subarray(9 + len);
    if (!c) continue;
    if (type === DATA) c.write(Buffer.from(payload));
    else if (type === CLOSE) {
      conns.delete(c.bridgeId);
      c.destroy();
    }
  }
}

const buf = Buffer.alloc(1 << 16);
function readLoop() {
  read(fd, buf, 0, buf.length, null, (e, n) => {
    if (e) return fatal(`read ${device}: ${e.message}`);
    if (n > 0) onBytes(Buffer.from(buf.subarray(0, n)));
    readLoop();
  });
}
readLoop();

createServer((c) => {
  const id = nextId++;
  c.bridgeId = id;
  conns.set(id, c);
  send(OPEN, id);
  c.on('data', (b) => send(DATA, id, b));
  const closed = () => {
    if (conns.delete(id)) send(CLOSE, id);
  };
  c.on('close', closed);
  c.on('error', closed);
}).listen(Number(port), '127.0.0.1', () => process.stdout.write('ready\n'));
