// The facts-only read takes each save output a line at a time as the command prints it
// (line-split.ts) and keeps only the nat table's lines (nat-lines.ts): the facts, warnings,
// errors and digest must be those of the whole output, wherever the pipe cuts it; a line
// past the bound is a clear error; and the other tables are not kept.
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { syntheticCluster } from '../../../bench/agent-cluster.js';
import { kubeProxyRules } from '../../../bench/kube-proxy-rules.js';
import { LineSplitter, LineTooLong } from '../../../src/kernel/nat/line-split.js';
import { eachLine } from '../../../src/kernel/nat/lines.js';
import { NatLineStore } from '../../../src/kernel/nat/nat-lines.js';
import { NatRules } from '../../../src/kernel/nat/nat-rules.js';
import { NAT_LINE_MAX_BYTES } from '../../../src/kernel/nat/read.js';
import { outputDigest, SaveHash } from '../../../src/kernel/nat/save-digest.js';
import { FILTER_DROP_CHAINS, type KubeNatFacts, kubeNatFacts, natRulesFacts } from '../../../src/kubeproxy/facts.js';
import { readNatFacts } from '../../../src/kubeproxy/read-facts.js';
import { fixture } from './fixtures.js';

/** The lines LineSplitter hands over when `text` arrives in chunks of `size` bytes. */
function split(
  text: string | Buffer,
  size: number,
  max = 1 << 16,
): { line: string; lineNo: number; terminated: boolean }[] {
  const out: { line: string; lineNo: number; terminated: boolean }[] = [];
  const s = new LineSplitter(max, (buf, start, end, lineNo, terminated) =>
    out.push({ line: buf.toString('utf8', start, end), lineNo, terminated }),
  );
  const bytes = Buffer.from(text);
  for (let at = 0; at < bytes.length; at += size) s.push(bytes.subarray(at, at + size));
  s.end();
  return out;
}

/** A NatLineStore and a SaveHash fed as the facts-only read feeds them, `text` arriving in chunks of `size`. */
function streamed(text: string, size: number): { store: NatLineStore; digest: string } {
  const store = new NatLineStore(NAT_LINE_MAX_BYTES, FILTER_DROP_CHAINS);
  const hash = new SaveHash();
  const s = new LineSplitter(NAT_LINE_MAX_BYTES, (buf, start, end, lineNo, terminated) => {
    hash.line(buf, start, end, terminated);
    store.line(buf, start, end, lineNo, terminated);
  });
  const bytes = Buffer.from(text);
  for (let at = 0; at < bytes.length; at += size) s.push(Buffer.from(bytes.subarray(at, at + size)));
  s.end();
  store.end();
  return { store, digest: hash.digest() };
}

type Outcome = { facts: KubeNatFacts; warnings: string[] } | { error: string };
const outcome = (make: () => NatRules): Outcome => {
  try {
    const t = make();
    return { facts: natRulesFacts([t], []), warnings: t.warnings };
  } catch (e) {
    return { error: String(e) };
  }
};

const OLD = fixture('iptables-1.21-legacy.v4.save');

describe('LineSplitter', () => {
  it('gives the lines eachLine gives, wherever the chunks end', () => {
    const text = 'a\n\nbcd\r\nefgh\n\u00e9\u20ac x\nlast';
    const want: string[] = [];
    const buf = Buffer.from(text);
    eachLine(buf, (s, e) => want.push(buf.toString('utf8', s, e)));
    for (const size of [1, 2, 3, 5, 7, 64]) {
      const got = split(text, size);
      expect(
        got.map((l) => l.line),
        `chunks of ${size}`,
      ).toEqual(want);
      expect(got.map((l) => l.lineNo)).toEqual(want.map((_, i) => i + 1));
      expect(got.map((l) => l.terminated)).toEqual(want.map((_, i) => i < want.length - 1));
    }
    expect(split('x\n', 3).map((l) => [l.line, l.terminated])).toEqual([
      ['x', true],
      ['', false],
    ]);
  });

  it('refuses a line longer than its bound, in one chunk or across chunks, and names it', () => {
    const text = `short\n${'y'.repeat(100)}\nnext\n`;
    for (const size of [1000, 7]) {
      expect(() => split(text, size, 64)).toThrow(new LineTooLong(2, 64));
      expect(() => split(text, size, 64)).toThrow('line 2 is longer than 64 bytes (the bound on one line of output)');
    }
    expect(split(text, 7, 100).map((l) => l.line.length)).toEqual([5, 100, 4, 0]);
    // An unterminated last line is bounded too.
    expect(() => split(`ok\n${'z'.repeat(65)}`, 10, 64)).toThrow(new LineTooLong(2, 64));
  });
});

describe('NatLineStore: the facts, warnings and errors of the whole output from the nat lines alone', () => {
  const filter = (n: number): string =>
    `*filter\n:INPUT ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n${Array.from({ length: n }, (_, i) => `-A KUBE-SERVICES -d 10.96.${i >> 8}.${i & 255}/32 -p tcp -m comment --comment "ns/s${i}:p has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable`).join('\n')}\nCOMMIT\n`;
  const variants: [string, string][] = [
    ['1.21 legacy', OLD],
    ['1.29 nft', fixture('iptables-1.29-nft.v4.save')],
    ['filter table first', `${filter(50)}${OLD}`],
    ['filter table last, CRLF', `${OLD}${filter(5)}`.replaceAll('\n', '\r\n')],
    ['a second nat table', `${OLD}\n*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -j ACCEPT\nCOMMIT\n`],
    [
      'an unrecognised line in the filter table and one in nat',
      `${filter(3).replace(':INPUT', 'bogus words\n:INPUT')}${OLD.replace(':KUBE-SERVICES', 'other bogus\n:KUBE-SERVICES')}`,
    ],
    ['a rule after COMMIT', `${OLD}-A KUBE-SERVICES -j ACCEPT\n`],
    ['a chain before any table', `:KUBE-X - [0:0]\n${OLD}`],
    ['truncated in the nat table', OLD.slice(0, OLD.indexOf('-A KUBE-SVC-'))],
    ['truncated with blank lines after', `${OLD.slice(0, OLD.indexOf('-A KUBE-SVC-'))}\n\n  \n`],
    [
      'a table header spaced and a COMMIT with a no-break space',
      `${filter(2).replace('*filter', '  *filter ').replace('COMMIT', 'COMMIT\u00a0')}${OLD}`,
    ],
    ['an incompatible note', `# Table \`nat' is incompatible, use 'nft' tool.\n${OLD}`],
    ['no save output at all', 'create KUBE-LOAD-BALANCER hash:ip,port\nadd KUBE-LOAD-BALANCER 192.0.2.1,tcp:80\n'],
    ['a bad table header', `${OLD}*Bad Table\n`],
  ];

  it('for the fixtures and malformed variants, in chunks of any size', () => {
    for (const [name, text] of variants) {
      const want = outcome(
        () => new NatRules(Buffer.from(text), { source: 's', family: 4, filterChains: FILTER_DROP_CHAINS }),
      );
      for (const size of [1, 13, 4096, 1 << 20]) {
        expect(
          outcome(
            () =>
              new NatRules(streamed(text, size).store, { source: 's', family: 4, filterChains: FILTER_DROP_CHAINS }),
          ),
          `${name}, chunks of ${size}`,
        ).toEqual(want);
      }
    }
    const e = outcome(
      () =>
        new NatRules(streamed(variants.at(-2)![1], 13).store, {
          source: 's',
          family: 4,
          filterChains: FILTER_DROP_CHAINS,
        }),
    );
    expect(e).toEqual({
      error: expect.stringMatching(/^NatParseError: s:2: no table found; not iptables-save output/),
    });
  });

  it("for kube-proxy's rules of 300 LB Services beside a filter table, keeping only the nat table's bytes", () => {
    const nat = kubeProxyRules(syntheticCluster(300, 1200).list.items).text;
    const text = `${filter(20_000)}${nat}`;
    const want = outcome(
      () => new NatRules(Buffer.from(text), { source: 's', family: 4, filterChains: FILTER_DROP_CHAINS }),
    );
    expect('facts' in want && want.facts.loadBalancers.length).toBeGreaterThan(300);
    const { store } = streamed(text, 65_536);
    expect(outcome(() => new NatRules(store, { source: 's', family: 4, filterChains: FILTER_DROP_CHAINS }))).toEqual(
      want,
    );
    // The filter table (2.6 MB here) is not kept: the chunks hold the nat table and a chunk's slack.
    expect(Buffer.byteLength(filter(20_000))).toBeGreaterThan(2.5e6);
    expect(store.bytes).toBeLessThanOrEqual(Buffer.byteLength(nat.slice(nat.indexOf('*nat'))) + (1 << 20));
  });

  it('digests an output a line at a time as it digests it whole', () => {
    for (const [name, text] of variants) {
      for (const size of [1, 13, 4096]) expect(streamed(text, size).digest, name).toBe(outputDigest(text));
    }
    // Timestamps and chain counters are left out either way.
    const later = OLD.replace(/^# (Generated|Completed) (.*) on .*$/gm, '# $1 $2 on Fri Jan  1 00:00:00 2027').replace(
      ':PREROUTING ACCEPT [0:0]',
      ':PREROUTING ACCEPT [7:420]',
    );
    expect(later).not.toBe(OLD);
    expect(streamed(later, 13).digest).toBe(outputDigest(OLD));
    expect(streamed(OLD.replace('--dport 80', '--dport 81'), 13).digest).not.toBe(outputDigest(OLD));
  });
});

describe('readNatFacts facts-only: save commands read a line at a time', () => {
  let bin: string;
  const savedPath = process.env.PATH;
  /** Fake save commands on PATH: each prints its file (or nothing). */
  const tools = (outputs: Record<string, string>): void => {
    for (const cmd of [
      'iptables-legacy-save',
      'ip6tables-legacy-save',
      'iptables-nft-save',
      'ip6tables-nft-save',
      'ipset',
    ]) {
      const file = join(bin, `${cmd}.out`);
      writeFileSync(file, outputs[cmd] ?? '');
      writeFileSync(join(bin, cmd), `#!/bin/sh\nexec cat '${file}'\n`);
      chmodSync(join(bin, cmd), 0o755);
    }
    process.env.PATH = `${bin}:${savedPath}`;
  };
  beforeEach(() => {
    bin = mkdtempSync(join(tmpdir(), 'clbprobe-natlines-'));
  });
  afterEach(() => {
    process.env.PATH = savedPath;
    rmSync(bin, { recursive: true, force: true });
  });

  it('gives the facts and the digest of the whole-output read', async () => {
    tools({
      'iptables-nft-save': fixture('iptables-1.29-nft.v4.save'),
      'ip6tables-nft-save': fixture('iptables-1.29-nft.v6.save'),
      'iptables-legacy-save': OLD.slice(0, 200),
    });
    const whole = await readNatFacts();
    const lines = await readNatFacts({ factsOnly: true });
    expect(lines.sources).toEqual(whole.sources.map((s) => ({ ...s, durationMs: expect.any(Number) })));
    expect(lines.nat!.facts).toEqual(kubeNatFacts(whole.nat));
    expect(lines.nat!.facts!.loadBalancers.length).toBeGreaterThan(2);
    expect(lines.digest).toBe(whole.digest);
    expect(await readNatFacts({ factsOnly: true, unchangedSince: whole.digest })).toEqual({
      sources: [],
      digest: whole.digest,
      unchanged: true,
    });
  });

  it('IPVS mode with its ipsets', async () => {
    tools({ 'iptables-nft-save': fixture('ipvs-1.28.v4.save'), ipset: fixture('ipvs-1.28.ipset.save') });
    const lines = await readNatFacts({ factsOnly: true });
    const whole = await readNatFacts();
    expect(whole.nat!.ipsets!.sets.length).toBeGreaterThan(5);
    expect(lines.nat!.facts).toEqual(kubeNatFacts(whole.nat));
    expect(lines.nat!.facts!.mode).toBe('ipvs');
    expect(lines.nat!.facts!.loadBalancers.length).toBe(2);
    expect(lines.digest).toBe(whole.digest);
  });

  it('makes a line past the bound a clear reason, not a crash or a buffer without end', async () => {
    const long = OLD.replace('"shop/web:http"', `"${'w'.repeat(70_000)}"`);
    tools({ 'iptables-nft-save': long, 'iptables-legacy-save': '' });
    const line = long.slice(0, long.indexOf('w'.repeat(10))).split('\n').length;
    const r = await readNatFacts({ factsOnly: true });
    expect(r.nat).toBeUndefined();
    expect(r.sources[0]).toEqual({
      source: 'nat',
      available: false,
      reason: `iptables-nft-save: line ${line} is longer than 65536 bytes (the bound on one line of output); stopped reading it`,
      durationMs: expect.any(Number),
    });
    // A bound of the caller's choosing; within it the same output reads.
    expect((await readNatFacts({ factsOnly: true, maxLineBytes: 128 * 1024 })).nat?.facts?.mode).toBe('iptables');
    // In the IPv6 output it is a note, and the IPv4 facts stand.
    tools({ 'iptables-nft-save': OLD, 'ip6tables-nft-save': `*nat\n${'#'.repeat(70_000)}\nCOMMIT\n` });
    const v6 = await readNatFacts({ factsOnly: true });
    expect(v6.nat?.facts?.mode).toBe('iptables');
    expect(v6.sources[0]!.reason).toBe(
      'IPv6 rules unavailable: ip6tables-nft-save: line 2 is longer than 65536 bytes (the bound on one line of output); stopped reading it',
    );
  });

  it('carries an unreadable IPv6 save as unknown IPv6 rules into the facts, not as no IPv6 rules', async () => {
    tools({ 'iptables-nft-save': OLD, 'ip6tables-nft-save': `*nat\n${'#'.repeat(70_000)}\nCOMMIT\n` });
    const reason =
      'ip6tables-nft-save: line 2 is longer than 65536 bytes (the bound on one line of output); stopped reading it';
    const r = await readNatFacts({ factsOnly: true });
    expect(r.nat?.unreadable).toEqual({ 6: reason });
    expect(kubeNatFacts(r.nat).unreadable).toEqual({ 6: reason });
    tools({ 'iptables-nft-save': OLD });
    expect(kubeNatFacts((await readNatFacts({ factsOnly: true })).nat)).not.toHaveProperty('unreadable');
  });
});
