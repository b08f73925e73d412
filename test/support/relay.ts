// Byte relays between a test's network namespaces and the root namespace's loopback, through a
// Unix socket (a file both sides see): the NETWORK SAFETY RULE forbids reaching an address that
// only exists inside a test namespace from the root namespace, and a namespace cannot reach the
// root's 127.0.0.1 at all. One relay is a small node process (in a namespace when `netns` is
// given) that accepts on `listen` and pipes each connection to a new connection to `connect`.
// - the API server for an agent in a namespace: relay(ns, {port: P}, {path: S}) + relay(undefined, {path: S}, {port: apiPort});
// - the API server's proxy to that agent: relay(ns, {path: S2}, {port: 9811}), then connect to S2.
import { type ChildProcess, spawn } from 'node:child_process';

export type Endpoint = { port: number; host?: string } | { path: string };

const SCRIPT = `
const net = require('node:net');
const [listen, connect] = process.argv.slice(1).map((x) => JSON.parse(x));
const at = (e) => ('port' in e ? { port: e.port, host: e.host || '127.0.0.1' } : { path: e.path });
const server = net.createServer((c) => {
  const u = net.connect(at(connect));
  c.pipe(u).pipe(c);
  const end = () => { c.destroy(); u.destroy(); };
  c.on('error', end); u.on('error', end); c.on('close', end); u.on('close', end);
});
server.listen(at(listen), () => process.stdout.write('ready\\n'));
`;

export interface Relay {
  process: ChildProcess;
  close(): void;
}

/** Starts a relay and resolves once it listens. */
export function relay(netns: string | undefined, listen: Endpoint, connect: Endpoint): Promise<Relay> {
  const argv = [process.execPath, '-e', SCRIPT, JSON.stringify(listen), JSON.stringify(connect)];
  const p = netns
    ? spawn('ip', ['netns', 'exec', netns, ...argv], { stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  p.stderr!.on('data', (b: Buffer) => (err += b.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => (p.kill('SIGKILL'), reject(new Error(`relay did not start: ${err}`))), 10_000);
    p.stdout!.once('data', () => {
      clearTimeout(timer);
      resolve({ process: p, close: () => void p.kill('SIGKILL') });
    });
    p.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`relay exited ${code}: ${err}`));
    });
  });
}
