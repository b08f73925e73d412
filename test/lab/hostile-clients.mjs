// A hostile client for test/lab/hostile-clients.test.ts: opens N connections to a TCP port or a
// Unix socket and holds them, re-opening once (1 s later) each one the server closes (a loop of
// re-opens is a connection flood, which a listen queue cannot tell from real clients and no
// application cap can stop), in one of three manners:
// silent (connects, says nothing), slow (sends half a request's headers, then nothing), or
// nonreading (asks for a big answer and never reads it). Prints "attempted N" once all N were
// tried (connected, or refused: a full listen queue), then "stats open=.. opened=..
// closedByServer=.. refused=.." every second (open: not closed as this side sees it; a paused
// reader does not see the server's close).
import { createConnection } from 'node:net';

const [target, countText, manner] = process.argv.slice(2);
const count = Number(countText);
const addr = /^\d+$/.test(target) ? { port: Number(target), host: '127.0.0.1' } : { path: target };
const request = {
  silent: '',
  slow: 'GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: ',
  nonreading: /^\d+$/.test(target) ? 'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n' : '{"service":"lab/web","watchS":3600}\n',
}[manner];
let open = 0;
let opened = 0;
let closedByServer = 0;
let refused = 0;
let attempts = 0;
const attempted = () => {
  if (!announced && ++attempts >= count) {
    announced = true;
    console.log(`attempted ${attempts}`);
  }
};
let announced = false;
function one(reopens = 1) {
  const s = createConnection(addr);
  s.on('error', () => {
    if (!connected) {
      refused++;
      attempted();
    }
  });
  let connected = false;
  s.once('connect', () => {
    connected = true;
    open++;
    opened++;
    if (request) s.write(request);
    if (manner === 'nonreading') s.pause();
    attempted();
  });
  s.once('close', () => {
    if (connected) {
      open--;
      closedByServer++;
    }
    if (reopens > 0) setTimeout(() => one(reopens - 1), 1000);
  });
}
// Opened in bursts of 500, so the listen backlog is not the limit being measured.
let started = 0;
const burst = () => {
  for (let i = 0; i < 500 && started < count; i++, started++) one();
  if (started < count) setTimeout(burst, 20);
};
burst();
setInterval(() => console.log(`stats open=${open} opened=${opened} closedByServer=${closedByServer} refused=${refused}`), 1000);
