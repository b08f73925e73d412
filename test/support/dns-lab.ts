// A DNS server inside a test namespace (test/support/dns-responder.mjs) and
// that namespace's resolv.conf at /etc/netns/NAME/resolv.conf, which
// `ip netns exec NAME` binds over /etc/resolv.conf. The zone can be changed
// while the server runs; stop() kills it and removes the files.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Netns } from './netns.js';

const RESPONDER = join(import.meta.dirname, 'dns-responder.mjs');

export type Zone = Record<string, { A?: [string, number][]; AAAA?: [string, number][]; rcode?: number; mode?: string }>;

export interface DnsServer {
  setZone(zone: Zone): void;
  /** Makes `client`'s resolv.conf name this server (at `address` as the client reaches it). */
  serve(client: Netns, address: string, options?: string): void;
  stop(): void;
}

export async function startDns(ns: Netns, listen: string, zone: Zone): Promise<DnsServer> {
  const dir = mkdtempSync(join(tmpdir(), 'cbd2-dns-'));
  const zoneFile = join(dir, 'zone.json');
  writeFileSync(zoneFile, JSON.stringify(zone));
  const confDirs: string[] = [];
  const p: ChildProcess = spawn('ip', ['netns', 'exec', ns.name, process.execPath, RESPONDER, zoneFile, listen], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve, reject) => {
    p.stdout!.once('data', () => resolve());
    p.once('exit', (code) => reject(new Error(`dns responder exited ${code}`)));
  });
  return {
    setZone(z) {
      // The responder reads it at every query.
      writeFileSync(zoneFile, JSON.stringify(z));
    },
    serve(client, address, options = 'options timeout:1 attempts:1') {
      const d = `/etc/netns/${client.name}`;
      mkdirSync(d, { recursive: true });
      writeFileSync(`${d}/resolv.conf`, `nameserver ${address}\n${options}\n`);
      confDirs.push(d);
    },
    stop() {
      p.kill('SIGKILL');
      for (const d of confDirs) rmSync(d, { recursive: true, force: true });
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
