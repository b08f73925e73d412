// Serves evidence to local callers over a Unix socket (mode 0600: root, or
// whoever `kubectl exec`s into the agent pod). Never on the metrics port:
// connection data stays behind the node's (and the cluster's RBAC's) access control.
import { chmodSync, mkdirSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { dirname } from 'node:path';
import type { ServiceView } from '../cluster/types.js';
import type { ConntrackTable, KeptEntry } from './conntrack-table.js';
import { belongsTo, entryLine, parseServiceRef, serviceAddresses, type EvidenceLine, type EvidenceRequest } from './evidence.js';

export interface EvidenceBackend {
  table(): ConntrackTable;
  find(namespace: string, name: string, port?: number): ServiceView[];
  nodeName: string;
  ifname?: string;
}

/** Longest watch a caller may ask for. */
const MAX_WATCH_S = 3600;

const json = (l: EvidenceLine): string =>
  `${JSON.stringify(l, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))}\n`;

function answer(sock: Socket, req: EvidenceRequest, b: EvidenceBackend): void {
  const { namespace, name } = parseServiceRef(req.service);
  const svcs = b.find(namespace, name, req.port);
  if (!svcs.length) {
    const what = `${namespace}/${name}${req.port ? ` port ${req.port}` : ''}`;
    throw new Error(`no LoadBalancer Service ${what} in this node's cluster view`);
  }
  sock.write(json({ type: 'service', service: serviceAddresses(svcs, b.ifname), node: b.nodeName }));
  const table = b.table();
  let n = 0;
  for (const k of [...table.entries()].filter((k) => belongsTo(k, svcs)).sort((x, y) => x.firstSeenMs - y.firstSeenMs)) {
    sock.write(json(entryLine(k, false)));
    n++;
  }
  const watchS = Math.min(req.watchS ?? 0, MAX_WATCH_S);
  if (!(watchS > 0)) {
    sock.end(json({ type: 'end', entries: n }));
    return;
  }
  const listener = (k: KeptEntry) => {
    if (!belongsTo(k, svcs)) return;
    n++;
    sock.write(json(entryLine(k, true)));
  };
  table.listeners.add(listener);
  const stop = () => {
    clearTimeout(timer);
    table.listeners.delete(listener);
  };
  const timer = setTimeout(() => {
    stop();
    sock.end(json({ type: 'end', entries: n }));
  }, watchS * 1000);
  sock.once('close', stop);
}

export function startEvidenceServer(path: string, backend: EvidenceBackend): Promise<Server> {
  mkdirSync(dirname(path), { recursive: true });
  rmSync(path, { force: true });
  const server = createServer((sock) => {
    let buf = '';
    sock.setEncoding('utf8');
    sock.on('error', () => sock.destroy());
    sock.on('data', (d: string) => {
      buf += d;
      const nl = buf.indexOf('\n');
      if (nl < 0) {
        if (buf.length > 4096) sock.end(json({ type: 'error', message: 'request too long' }));
        return;
      }
      sock.removeAllListeners('data');
      try {
        answer(sock, JSON.parse(buf.slice(0, nl)) as EvidenceRequest, backend);
      } catch (e) {
        sock.end(json({ type: 'error', message: e instanceof Error ? e.message : String(e) }));
      }
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, () => {
      chmodSync(path, 0o600);
      resolve(server);
    });
  });
}
