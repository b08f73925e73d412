// Sends a planned number of UDP datagrams and TCP connection attempts from
// inside a namespace (run under `ip netns exec`); used by the capture tests
// and the capture benchmark. Prints one JSON line with what happened.
//   node --import tsx test/lab/capture-sender.ts '[{"proto":"udp","src":"10.0.0.1","dst":"10.0.0.2","port":80,"count":5}]'
import { createSocket } from 'node:dgram';
import { connect, isIPv6 } from 'node:net';

export interface Send {
  proto: 'udp' | 'tcp';
  src: string;
  dst: string;
  port: number;
  count: number;
  /** UDP payload bytes (default 100). */
  payload?: number;
}

async function sendUdp(s: Send): Promise<number> {
  const sock = createSocket(isIPv6(s.dst) ? 'udp6' : 'udp4');
  await new Promise<void>((res, rej) => {
    sock.once('error', rej);
    sock.bind({ address: s.src, port: 0 }, () => res());
  });
  const buf = Buffer.alloc(s.payload ?? 100, 0x61);
  let sent = 0;
  for (let i = 0; i < s.count; i++) {
    await new Promise<void>((res, rej) => sock.send(buf, s.port, s.dst, (e) => (e ? rej(e) : res())));
    sent++;
  }
  sock.close();
  return sent;
}

/** One SYN each: the peer has no listener and answers with RST. */
async function sendTcp(s: Send): Promise<number> {
  let refused = 0;
  for (let i = 0; i < s.count; i++) {
    const outcome = await new Promise<string>((res) => {
      const c = connect({ host: s.dst, port: s.port, localAddress: s.src });
      c.on('error', (e: NodeJS.ErrnoException) => res(e.code ?? 'error'));
      c.on('connect', () => {
        c.destroy();
        res('connected');
      });
    });
    if (outcome !== 'ECONNREFUSED')
      throw new Error(`tcp ${s.src} -> ${s.dst}:${s.port}: ${outcome}, expected ECONNREFUSED`);
    refused++;
  }
  return refused;
}

const plan = JSON.parse(process.argv[2] ?? '[]') as Send[];
const done: number[] = [];
for (const s of plan) done.push(s.proto === 'udp' ? await sendUdp(s) : await sendTcp(s));
process.stdout.write(`${JSON.stringify({ done })}\n`);
