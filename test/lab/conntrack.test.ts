// Conntrack reader against the real kernel: decoded entries equal
// `conntrack -L` field by field; kernel-side filters; live events; resync
// after a forced overflow.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ConntrackFilter, dumpConntrack, readConntrack } from '../../src/kernel/conntrack/dump.js';
import { ConntrackWatch } from '../../src/kernel/conntrack/events.js';
import { formatConntrack } from '../../src/kernel/conntrack/format.js';
import type { ConntrackEntry, ConntrackEvent } from '../../src/kernel/types.js';
import { isRoot, Netns, vethPair } from '../support/netns.js';

/** conntrack -L lines with the timeout column blanked (it ticks between the two reads). */
function normalise(line: string): string {
  return line.replace(/^((?:ipv[46]\s+\d+\s+)?\S+\s+\d+\s+)\d+/, '$1T');
}

async function ours(ns: Netns, filter?: ConntrackFilter): Promise<string[]> {
  const lines: string[] = [];
  await dumpConntrack(
    (b) => void b.forEach((e) => lines.push(normalise(formatConntrack(e, { extended: true, id: true })))),
    {
      netns: ns.path,
      ...(filter ? { filter } : {}),
    },
  );
  return lines.sort();
}

function theirs(ns: Netns, ...args: string[]): string[] {
  return ns
    .run('conntrack', '-L', '-o', 'extended,id', ...args)
    .split('\n')
    .filter(Boolean)
    .map(normalise)
    .sort();
}

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe.skipIf(!isRoot)('conntrack (ctnetlink, real kernel)', () => {
  let client: Netns;
  let server: Netns;
  let listener: ChildProcess | undefined;

  beforeAll(async () => {
    client = Netns.create('cbl-ct');
    server = Netns.create('cbl-ct');
    vethPair(client, 'eth0', server, 'eth0');
    client.sh('ip addr add 10.30.0.1/24 dev eth0; ip addr add fd00:30::1/64 dev eth0 nodad');
    server.sh('ip addr add 10.30.0.2/24 dev eth0; ip addr add fd00:30::2/64 dev eth0 nodad');
    for (const ns of [client, server]) {
      // Conntrack runs in a namespace once a rule uses it (IPv6 too: platform notes).
      ns.sh(`iptables -A OUTPUT -m conntrack --ctstate NEW,ESTABLISHED -j ACCEPT
             ip6tables -A OUTPUT -m conntrack --ctstate NEW,ESTABLISHED -j ACCEPT
             sysctl -qw net.netfilter.nf_conntrack_acct=1`);
    }
    // A real TCP server and real traffic: established and closed flows.
    listener = spawn(
      'ip',
      [
        'netns',
        'exec',
        server.name,
        'node',
        '-e',
        `const s=require('net').createServer(c=>c.end('hi')); s.listen(8080,'::',()=>console.log('up'))`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    await new Promise<void>((resolve) => listener!.stdout!.once('data', () => resolve()));
    client.sh(`for a in 10.30.0.2 fd00:30::2; do
      node -e "const c=require('net').connect(8080,process.argv[1]);c.on('data',()=>{});c.on('end',()=>c.end())" $a; done
      node -e "const s=require('dgram').createSocket('udp4');s.send('x',9999,'10.30.0.2',()=>s.close())"`);
    // Entries of every shape the detectors meet: DNAT'ed VIP flows, unreplied, marks, zones, v6, UDP.
    client.sh(`
      conntrack -I -p tcp -s 10.30.0.1 -d 10.0.0.100 --sport 40000 --dport 80 -r 10.30.0.2 -q 10.30.0.1 --reply-port-src 30080 --reply-port-dst 40000 --state SYN_SENT -t 120 --dst-nat 10.30.0.2:30080
      conntrack -I -p tcp -s 10.0.0.100 -d 10.0.0.100 --sport 40001 --dport 80 --state SYN_SENT -t 120
      conntrack -I -p udp -s 10.30.0.1 -d 10.0.0.101 --sport 5353 --dport 53 -t 30 --mark 16384
      conntrack -I -p tcp -s 10.30.0.1 -d 10.0.0.102 --sport 1 --dport 2 --state ESTABLISHED -t 300 -u SEEN_REPLY,ASSURED -w 3
      conntrack -I -p tcp -s fd00:30::1 -d fd00::100 --sport 3 --dport 443 --state SYN_SENT -t 100
      conntrack -I -p sctp -s 10.30.0.1 -d 10.0.0.103 --sport 7000 --dport 7001 --orig-vtag 1 --reply-vtag 2 --state ESTABLISHED -t 300 -u SEEN_REPLY,ASSURED`);
  });
  afterAll(() => {
    listener?.kill('SIGKILL');
    client?.delete();
    server?.delete();
  });

  it('decodes every entry exactly as conntrack -L -o extended,id prints it', async () => {
    const want = theirs(client);
    expect(want.length).toBeGreaterThanOrEqual(8);
    expect(await ours(client)).toEqual(want);
    // The server's table holds only real-traffic entries, with counters.
    expect(await ours(server)).toEqual(theirs(server));
  });

  it('decodes status bits, NAT, zone, mark and counters into typed fields', async () => {
    const all: ConntrackEntry[] = [];
    await dumpConntrack((b) => void all.push(...b), { netns: client.path });
    const nat = all.find((e) => e.orig.dst === '10.0.0.100' && e.orig.sport === 40000)!;
    // conntrack -I --dst-nat sets the NAT-done bits (the kernel's own DNAT sets DST_NAT too).
    expect(nat.statusFlags).toEqual(expect.arrayContaining(['CONFIRMED', 'DST_NAT_DONE']));
    expect(nat.statusFlags).not.toContain('SEEN_REPLY');
    expect(nat.reply).toMatchObject({ src: '10.30.0.2', dst: '10.30.0.1', sport: 30080, dport: 40000 });
    expect(all.find((e) => e.orig.dst === '10.0.0.101')).toMatchObject({ proto: 'udp', mark: 16384 });
    expect(all.find((e) => e.orig.dst === '10.0.0.102')).toMatchObject({ zone: 3, tcpState: 'ESTABLISHED' });
    expect(all.find((e) => e.orig.dst === '10.0.0.103')).toMatchObject({ proto: 'sctp', sctpState: 'ESTABLISHED' });
    const real = all.find((e) => e.orig.dport === 8080 && e.family === 4)!;
    expect(real.origCounters!.packets).toBeGreaterThan(2);
    expect(real.statusFlags).toContain('ASSURED');
  });

  it('filters by any address in user space', async () => {
    // Any of the four addresses: the union of conntrack's per-field filters.
    const union = new Set([
      ...theirs(client, '-s', '10.30.0.2'),
      ...theirs(client, '-d', '10.30.0.2'),
      ...theirs(client, '-r', '10.30.0.2'),
      ...theirs(client, '-q', '10.30.0.2'),
    ]);
    expect(await ours(client, { addresses: ['10.30.0.2'] })).toEqual([...union].sort());
    expect(await ours(client, { addresses: ['fd00::100'] })).toEqual(theirs(client, '-d', 'fd00::100'));
  });

  it('summarises the whole table while keeping only filtered entries', async () => {
    const r = await readConntrack({ netns: client.path, entries: true, filter: { addresses: ['10.0.0.101'] } });
    expect(r.status.available).toBe(true);
    expect(r.summary!.total).toBe(theirs(client).length);
    expect(r.entries!.map((e) => e.orig.dst)).toEqual(['10.0.0.101']);
    expect(r.summary!.byProto.udp).toBeGreaterThanOrEqual(1);
  });

  it('streams NEW, UPDATE and DESTROY events', async () => {
    const seen: ConntrackEvent[] = [];
    const w = new ConntrackWatch({ netns: client.path, onEvent: (e) => seen.push(e) });
    try {
      client.sh(`conntrack -I -p tcp -s 10.30.0.1 -d 10.0.0.200 --sport 555 --dport 80 --state SYN_SENT -t 60
                 conntrack -U -p tcp -s 10.30.0.1 -d 10.0.0.200 --sport 555 --dport 80 -m 9 >/dev/null
                 conntrack -D -p tcp -s 10.30.0.1 -d 10.0.0.200 --sport 555 --dport 80 >/dev/null`);
      await until(() => seen.some((e) => e.type === 'DESTROY'));
      const mine = seen.filter((e) => e.entry.orig.dst === '10.0.0.200');
      expect(mine.map((e) => e.type)).toEqual(['NEW', 'UPDATE', 'DESTROY']);
      expect(mine[1]!.entry.mark).toBe(9);
      expect(w.stats.overflows).toBe(0);
    } finally {
      w.stop();
    }
  });

  it('reads events that arrive one by one in batches (a rest after each drained queue)', async () => {
    const seen: ConntrackEvent[] = [];
    const w = new ConntrackWatch({ netns: client.path, events: ['NEW'], onEvent: (e) => seen.push(e) });
    try {
      // 20 entries ~20 ms apart (400 ms): unpaced, ~20 wakeups; resting 100 ms after each, ~5.
      // Asynchronously (client.sh would block the event loop: one batch whatever the pacing).
      await promisify(execFile)('nsenter', [
        `--net=${client.path}`,
        'sh',
        '-c',
        `for i in $(seq 1 20); do conntrack -I -p udp -s 10.30.0.1 -d 10.0.8.8 --sport $((20000+i)) --dport 53 -t 60 2>/dev/null; sleep 0.02; done`,
      ]);
      await until(() => seen.filter((e) => e.entry.orig.dst === '10.0.8.8').length === 20);
      const batches = new Set(seen.filter((e) => e.entry.orig.dst === '10.0.8.8').map((e) => e.receivedAtMs));
      expect(batches.size).toBeLessThanOrEqual(8);
    } finally {
      w.stop();
    }
  });

  it('reports an overflow (ENOBUFS) and resyncs by dumping the table', async () => {
    const resync = { begins: [] as string[], entries: 0, ends: 0 };
    // A tiny receive buffer and a blocked event loop force the kernel to drop events.
    const w = new ConntrackWatch({
      netns: client.path,
      rcvbuf: 4096,
      onEvent: () => {},
      resync: {
        begin: (reason) => void resync.begins.push(reason),
        entries: (b) => void (resync.entries += b.length),
        end: () => void resync.ends++,
      },
    });
    try {
      // Synchronous: the event loop cannot read while 300 entries are created.
      client.sh(
        `for i in $(seq 1 300); do conntrack -I -p udp -s 10.30.0.1 -d 10.0.9.9 --sport $((10000+i)) --dport 53 -t 60 2>/dev/null; done`,
      );
      await until(() => resync.ends >= 1 && w.stats.overflows >= 1, 10_000);
      await w.idle();
      expect(resync.begins[0]).toBe('overflow');
      // The resync dump saw the whole table as it is now.
      expect(resync.entries).toBe(theirs(client).length);
      expect(w.stats.resyncs).toBeGreaterThanOrEqual(1);
      // Between dumps the dump socket holds no receive buffer (1 MiB touched by each dump)...
      const dumps = (w as unknown as { dumps: { batch?: Buffer } }).dumps;
      expect(dumps.batch).toBeUndefined();
      // ...and the next overflow's dump gets one again and reads the whole table.
      const before = { ends: resync.ends, entries: resync.entries };
      client.sh(
        `for i in $(seq 1 300); do conntrack -I -p udp -s 10.30.0.1 -d 10.0.9.10 --sport $((10000+i)) --dport 53 -t 60 2>/dev/null; done`,
      );
      await until(() => resync.ends > before.ends, 10_000);
      await w.idle();
      expect(resync.entries - before.entries).toBeGreaterThanOrEqual(theirs(client).length);
      expect(dumps.batch).toBeUndefined();
    } finally {
      w.stop();
    }
  });
});
