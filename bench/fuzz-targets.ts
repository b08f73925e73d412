// The fuzz harness's targets: every parser of outside input, each with its seeds (the real
// captured fixtures in test/fixtures) and a mutator. Shared by `npm run fuzz` (bench/fuzz.ts,
// >= 100k cases per parser) and the test suite (test/unit/fuzz/fuzz.test.ts, a few thousand).
//
// A crash is what a parser must never do on bad input: throw something that is not an Error, throw
// one of JavaScript's own errors (TypeError, RangeError, SyntaxError...: a bug showing, not a
// message for the user), or take longer than SLOW_MS on one input (a quadratic path). A parser's
// own errors (NetlinkParseError, NatParseError, BundleParseError, KubeConfigError...) are the
// clear errors it is supposed to give.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseEvidenceRequest } from '../src/agent/evidence-server.js';
import { modeFromConfig } from '../src/bundle/kube-proxy.js';
import { parseManifest } from '../src/bundle/manifest.js';
import { parseConntrackText } from '../src/bundle/parse-conntrack.js';
import { parseDnsLookups } from '../src/bundle/parse-dns.js';
import { parseIpAddrJson, parseIpRouteJson } from '../src/bundle/parse-ip.js';
import { parseSysctl } from '../src/bundle/parse-sysctl.js';
import { textLine } from '../src/cli/evidence-text.js';
import { buildClusterView, parsersFor } from '../src/cluster/build.js';
import { classifyDocuments } from '../src/cluster/file.js';
import { parseJsonDocuments } from '../src/cluster/json-docs.js';
import { parseWatchLine } from '../src/cluster/kube-api.js';
import { loadApiTarget } from '../src/cluster/kube-config.js';
import { decodeAddress, decodeLink } from '../src/kernel/addresses.js';
import { decodeEntry } from '../src/kernel/conntrack/decode.js';
import { decodeDest, decodeService } from '../src/kernel/ipvs/decode.js';
import { parseIpvsadm } from '../src/kernel/ipvs/ipvsadm-text.js';
import { parseIpsetList, parseIpsetSave } from '../src/kernel/nat/ipset.js';
import { parseIptablesSave } from '../src/kernel/nat/iptables-save.js';
import { LineSplitter } from '../src/kernel/nat/line-split.js';
import { NatLineStore } from '../src/kernel/nat/nat-lines.js';
import { NatRules } from '../src/kernel/nat/nat-rules.js';
import { NAT_LINE_MAX_BYTES } from '../src/kernel/nat/read.js';
import { NLMSG_DONE, splitMessages } from '../src/kernel/netlink/codec.js';
import { nftSnapshotOfRuleset } from '../src/kernel/nft/read.js';
import { FILTER_DROP_CHAINS, kubeNatFacts, natRulesFacts } from '../src/kubeproxy/facts.js';
import { parseEvidenceLine } from '../src/remote/evidence-lines.js';
import { localRoutesOf } from '../src/source/local-routes.js';

const FX = join(import.meta.dirname, '../test/fixtures');
const text = (p: string): string => readFileSync(join(FX, p), 'utf8');

export const SLOW_MS = 1000;

// ---- deterministic randomness -------------------------------------------------------------------

/** xorshift32: the same seed gives the same cases, so a crash can be replayed by its case number. */
export class Rng {
  constructor(private s: number) {
    if (this.s === 0) this.s = 0x9e3779b9;
  }
  next(): number {
    let x = this.s;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.s = x >>> 0;
    return this.s;
  }
  int(n: number): number {
    return this.next() % Math.max(1, n);
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)]!;
  }
}

// ---- mutators ------------------------------------------------------------------------------------

const TOKENS = [
  '',
  '\n',
  '\r\n',
  '\t',
  ' ',
  '\0',
  '\\',
  '"',
  "'",
  ':',
  ',',
  '{',
  '}',
  '[',
  ']',
  '=',
  '/',
  '-',
  '#',
  '%',
  'null',
  'true',
  '[]',
  '{}',
  '""',
  '0',
  '-1',
  '65536',
  '4294967296',
  '1e309',
  'NaN',
  '0x10',
  '-0',
  '1.5',
  '__proto__',
  'constructor',
  'toString',
  '::',
  'fe80::1%eth0',
  '255.255.255.256',
  '10.0.0.1/33',
  'é',
  '\u2028',
  '\ud800',
  'x'.repeat(300),
  '\n'.repeat(200),
  ' '.repeat(300),
];
const VALUES: unknown[] = [
  null,
  true,
  false,
  0,
  -1,
  1.5,
  2 ** 32,
  1e300,
  '',
  'x',
  '-1',
  '80',
  '::',
  'fe80::1%eth0',
  [],
  {},
  [null],
  { __proto__: null },
  '__proto__',
  'constructor',
];

/** Byte/character-level mutation of text: flips, cuts, repeats, splices and dictionary tokens. */
export function mutateText(seed: string, rng: Rng, others: readonly string[]): string {
  let s = seed;
  const rounds = 1 + rng.int(4);
  for (let r = 0; r < rounds; r++) {
    const at = rng.int(s.length + 1);
    const len = 1 + rng.int(Math.min(64, s.length + 1));
    switch (rng.int(9)) {
      case 0: // flip a character
        s = s.slice(0, at) + String.fromCharCode(rng.int(128)) + s.slice(at + 1);
        break;
      case 1: // delete a range
        s = s.slice(0, at) + s.slice(at + len);
        break;
      case 2: // duplicate a range
        s = s.slice(0, at + len) + s.slice(at, at + len) + s.slice(at + len);
        break;
      case 3: // insert a token
        s = s.slice(0, at) + rng.pick(TOKENS) + s.slice(at);
        break;
      case 4: // replace a token-sized run with a token
        s = s.slice(0, at) + rng.pick(TOKENS) + s.slice(at + 1 + rng.int(8));
        break;
      case 5: // truncate
        s = s.slice(0, at);
        break;
      case 6: {
        // swap two lines
        const lines = s.split('\n');
        const i = rng.int(lines.length);
        const j = rng.int(lines.length);
        [lines[i], lines[j]] = [lines[j]!, lines[i]!];
        s = lines.join('\n');
        break;
      }
      case 7: {
        // splice in a piece of another seed
        const o = rng.pick(others);
        const from = rng.int(o.length);
        s = s.slice(0, at) + o.slice(from, from + 1 + rng.int(200)) + s.slice(at);
        break;
      }
      default: {
        // change a number
        s = s.replace(/\d+/g, (m) =>
          rng.int(8) === 0 ? rng.pick(['0', '-1', '65536', '4294967296', '99999999999999999999', '']) : m,
        );
      }
    }
  }
  return s;
}

/** Replaces one node of a JSON value (at any depth) with an odd value, deletes it, or swaps its type. */
export function mutateJsonValue(v: unknown, rng: Rng): unknown {
  const nodes: { parent: Record<string, unknown> | unknown[]; key: string | number }[] = [];
  const walk = (x: unknown): void => {
    if (Array.isArray(x)) {
      for (const [i, c] of x.entries()) {
        nodes.push({ parent: x, key: i });
        walk(c);
      }
    } else if (x && typeof x === 'object') {
      for (const [k, v] of Object.entries(x)) {
        nodes.push({ parent: x as Record<string, unknown>, key: k });
        walk(v);
      }
    }
  };
  const root = structuredClone(v);
  walk(root);
  const rounds = 1 + rng.int(3);
  for (let r = 0; r < rounds && nodes.length; r++) {
    const n = rng.pick(nodes);
    const p = n.parent as Record<string | number, unknown>;
    switch (rng.int(4)) {
      case 0:
        if (Array.isArray(p)) p.splice(n.key as number, 1);
        else delete p[n.key];
        break;
      case 1: {
        const cur = p[n.key];
        p[n.key] =
          typeof cur === 'string'
            ? Number(cur) || [cur]
            : typeof cur === 'number'
              ? String(cur)
              : Array.isArray(cur)
                ? Object.assign({}, cur)
                : cur === null
                  ? {}
                  : [cur];
        break;
      }
      default:
        p[n.key] = structuredClone(rng.pick(VALUES));
    }
  }
  return root;
}

function mutateJsonText(seed: string, rng: Rng, others: readonly string[], parsed: unknown): string {
  if (parsed !== undefined && rng.int(3) !== 0) {
    const out = JSON.stringify(mutateJsonValue(parsed, rng));
    return rng.int(4) === 0 ? mutateText(out, rng, others) : out;
  }
  return mutateText(seed, rng, others);
}

function mutateBytes(seed: Buffer, rng: Rng): Buffer {
  let b = Buffer.from(seed);
  const rounds = 1 + rng.int(4);
  for (let r = 0; r < rounds; r++) {
    const at = rng.int(b.length);
    switch (rng.int(6)) {
      case 0:
        b[at] = rng.int(256);
        break;
      case 1: // a 16-bit length or type field to an edge value
        if (at + 1 < b.length) b.writeUInt16LE(rng.pick([0, 1, 3, 4, 5, 0xffff, 0x8000, b.length, b.length - at]), at);
        break;
      case 2:
        b = b.subarray(0, at);
        break;
      case 3:
        b = Buffer.concat([b.subarray(0, at), b.subarray(at, at + 1 + rng.int(32)), b.subarray(at)]);
        break;
      case 4:
        b = Buffer.concat([b.subarray(0, at), b.subarray(at + 1 + rng.int(16))]);
        break;
      default:
        if (at < b.length) b[at] = b[at]! ^ (1 << rng.int(8));
    }
  }
  return b;
}

// ---- targets ---------------------------------------------------------------------------------------

export interface FuzzTarget {
  name: string;
  /** Seeds, each a case of its own first. */
  seeds: (string | Buffer)[];
  mutate(seed: string | Buffer, rng: Rng): string | Buffer;
  run(input: string | Buffer): unknown;
}

const datagramsOf = (p: string): Buffer[] =>
  text(p)
    .split('\n')
    .filter(Boolean)
    .map((h) => Buffer.from(h, 'hex'));
/** Netlink payloads of a recorded dump, each decoded by `decode`; the framing itself is fuzzed too. */
function netlinkTarget(name: string, file: string | Buffer[], decode: (p: Buffer) => unknown): FuzzTarget {
  const datagrams = typeof file === 'string' ? datagramsOf(file) : file;
  return {
    name,
    seeds: datagrams,
    mutate: (s, rng) => mutateBytes(s as Buffer, rng),
    run: (d) => {
      for (const m of splitMessages(d as Buffer)) if (m.type !== NLMSG_DONE) decode(m.payload);
    },
  };
}

function textTarget(name: string, files: string[], run: (t: string) => unknown): FuzzTarget {
  const seeds = files.map(text);
  return { name, seeds, mutate: (s, rng) => mutateText(s as string, rng, seeds), run: (t) => run(t as string) };
}

function jsonTarget(name: string, seeds: string[], run: (t: string) => unknown): FuzzTarget {
  const parsed = seeds.map((s) => {
    try {
      return JSON.parse(s) as unknown;
    } catch {
      return undefined;
    }
  });
  return {
    name,
    seeds,
    mutate: (s, rng) => {
      const i = seeds.indexOf(s as string);
      return mutateJsonText(s as string, rng, seeds, i >= 0 ? parsed[i] : undefined);
    },
    run: (t) => run(t as string),
  };
}

const ipvsReplies = (kind: 'service' | 'dest'): Buffer[] =>
  text('ipvs/genl-replies.txt')
    .split('\n')
    .filter((l) => l.startsWith(`${kind} `))
    .map((l) => Buffer.from(l.split(' ')[2]!, 'hex'));

const CLUSTER_FILES = [
  'cluster/kubectl-list.json',
  'cluster/malformed-objects.json',
  'cluster/multi-doc.json',
  'bundles/tke-ipvs-unbound-l4-loop/cluster.json',
  'bundles/l7-ingress-loop/cluster.json',
  'bundles/ipmode-proxy/cluster.json',
];

function clusterObjects(): unknown[] {
  const out: unknown[] = [];
  for (const f of CLUSTER_FILES) {
    try {
      for (const d of parseJsonDocuments(text(f))) {
        const items = (d as { items?: unknown[] })?.items;
        if (Array.isArray(items)) out.push(...items);
      }
    } catch {
      // a malformed fixture seeds the text targets only
    }
  }
  return out;
}

/** The watch stream's lines as the API server sends them, from the fixtures' objects. */
function watchLines(): string[] {
  const types = ['ADDED', 'MODIFIED', 'DELETED', 'BOOKMARK'];
  const lines = clusterObjects().map((o, i) => JSON.stringify({ type: types[i % types.length], object: o }));
  lines.push(
    '{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410}}',
  );
  lines.push('{"type":"ERROR"}');
  return lines;
}

const NFT_FILES = [
  'nft/kube-proxy-v1.31.ip.json',
  'nft/kube-proxy-v1.31.ip6.json',
  'nft/kube-proxy-v1.34.ip.json',
  'nft/kube-proxy-v1.34.ip6.json',
  'nft/ruleset-ipvs-1.28-iptables-nft.json',
];

/**
 * The captured `nft -j` listings, and per layout both families in one listing as `nft -j list
 * ruleset` prints them (one metainfo, then each table's objects).
 */
function nftListings(): string[] {
  const seeds = NFT_FILES.map(text);
  for (const layout of ['v1.31', 'v1.34']) {
    const [ip, ip6] = ['ip', 'ip6'].map(
      (f) => (JSON.parse(text(`nft/kube-proxy-${layout}.${f}.json`)) as { nftables: unknown[] }).nftables,
    );
    seeds.push(JSON.stringify({ nftables: [...ip!, ...ip6!.slice(1)] }));
  }
  return seeds;
}

const KIND_PARSER = {
  Service: 'services',
  EndpointSlice: 'endpointSlices',
  Ingress: 'ingresses',
  Node: 'nodes',
} as const;

/** A kubeconfig as kubectl writes one (no fixture file holds one: tests write theirs at run time). */
const KUBECONFIGS = [
  `apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: ${Buffer.from('-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n').toString('base64')}
    server: https://10.0.0.1:6443
  name: prod
contexts:
- context:
    cluster: prod
    namespace: default
    user: admin
  name: prod-admin
current-context: prod-admin
users:
- name: admin
  user:
    token: abc.def
`,
  `apiVersion: v1
kind: Config
clusters:
- cluster:
    server: http://127.0.0.1:8080/
    insecure-skip-tls-verify: true
  name: local
contexts:
- context: {cluster: local, user: basic}
  name: c
current-context: c
users:
- name: basic
  user: {username: admin, password: s3cret}
`,
];

export function fuzzTargets(): FuzzTarget[] {
  const kubeDir = mkdtempSync(join(tmpdir(), 'cbh-fuzz-kubeconfig-'));
  process.once('exit', () => rmSync(kubeDir, { recursive: true, force: true }));
  const kubePath = join(kubeDir, 'config');
  const parsers = parsersFor('node-a');
  const evidenceAnswers = [
    '{"type":"service","service":{"namespace":"lab","name":"web","ports":[{"port":80,"protocol":"TCP","nodePort":30080}],"vips":["10.0.100.100"],"endpoints":[{"address":"10.244.1.20","port":8080}]},"node":"node1"}',
    '{"type":"entry","class":"not_snated","line":"tcp 6 100 SYN_SENT src=10.244.1.10 dst=10.0.100.100 sport=1025 dport=80","firstSeen":"1970-01-01T00:00:00.001Z","lastSeen":"1970-01-01T00:00:00.001Z","entry":{"family":4},"live":false}',
    '{"type":"end","entries":10000,"truncated":true,"notSent":11000,"reason":"not sent: 11000 over the limit of 10000 entries per answer"}',
    '{"type":"error","message":"busy"}',
  ];
  return [
    netlinkTarget('netlink rtm-getlink', 'netlink/rtm-getlink.hex', decodeLink),
    netlinkTarget('netlink rtm-getaddr', 'netlink/rtm-getaddr.hex', decodeAddress),
    netlinkTarget('netlink ctnetlink dump', 'netlink/ctnetlink-dump.hex', decodeEntry),
    netlinkTarget('netlink ipvs service', ipvsReplies('service'), decodeService),
    netlinkTarget('netlink ipvs dest', ipvsReplies('dest'), (p) => decodeDest(p, 4)),
    textTarget(
      'conntrack -L / nf_conntrack text',
      [
        'netlink/conntrack-L.txt',
        'text/conntrack-L.txt',
        'text/conntrack-L-extended.txt',
        'text/conntrack-L-extended-id.txt',
        'text/conntrack-L-with-summary.txt',
        'text/proc-nf_conntrack.txt',
      ],
      (t) => parseConntrackText(t, 'f'),
    ),
    textTarget(
      'ipvsadm text',
      [
        'ipvs/ipvsadm-list.txt',
        'ipvs/ipvsadm-save.txt',
        'ipvs/ipvsadm-stats.txt',
        'ipvs/ipvsadm-persistent-conn.txt',
        'ipvs/ipvsadm-thresholds.txt',
        'ipvs/ipvsadm-tun-info.txt',
        'ipvs/ipvsadm-rate-after.txt',
      ],
      (t) => parseIpvsadm([{ source: 'f', text: t }]),
    ),
    textTarget(
      'iptables-save',
      [
        'nat/iptables-1.21-legacy.v4.save',
        'nat/iptables-1.29-nft.v4.save',
        'nat/iptables-1.29-nft.v6.save',
        'nat/ipvs-1.28.v4.save',
      ],
      (t) => parseIptablesSave(t, { source: 'f', family: 4 }),
    ),
    textTarget(
      'iptables-save facts',
      [
        'nat/iptables-1.21-legacy.v4.save',
        'nat/iptables-1.29-nft.v4.save',
        'nat/iptables-1.29-nft.v6.save',
        'nat/ipvs-1.28.v4.save',
      ],
      (t) => natFacts(t, ipvsSets),
    ),
    textTarget('ipset save', ['nat/ipvs-1.28.ipset.save'], (t) => parseIpsetSave(t, 'f')),
    textTarget('ipset save, bytes', ['nat/ipvs-1.28.ipset.save'], (t) => {
      // What the command printed is bytes: the reader used to decode them whole, now a line at a time.
      const bytes = Buffer.from(t);
      const a = JSON.stringify(parseIpsetSave(bytes.toString(), 'f'));
      if (JSON.stringify(parseIpsetSave(bytes, 'f')) !== a)
        throw new TypeError('ipset save read from bytes differs from the text read');
      return a;
    }),
    textTarget('ipset list', ['nat/ipvs-1.28.ipset-list.txt'], (t) => parseIpsetList(t, 'f')),
    textTarget('sysctl -a', ['text/sysctl.txt'], (t) => parseSysctl(t, 'f')),
    textTarget('kube-proxy config mode', ['text/sysctl.txt'], (t) => modeFromConfig(`${t}\nmode: "ipvs"\n`)),
    // The bundle's nft-ruleset.json as the nft source reads it (an unusable listing is refused with
    // an NftParseError), then kube-proxy's tables interpreted: that must never throw, whatever
    // the tables hold, or every table is lost for one bad item.
    jsonTarget('nft -j list ruleset, kube-proxy facts', nftListings(), (t) => {
      const snap = nftSnapshotOfRuleset(t, 'f');
      try {
        return kubeNatFacts(undefined, snap);
      } catch (e) {
        throw new TypeError(`the kube-proxy interpretation threw, losing every table: ${(e as Error).message}`);
      }
    }),
    jsonTarget(
      'ip -j addr',
      [text('text/ip-addr.json'), text('text/ip-d-addr.json'), text('netlink/ip-addr.json')],
      (t) => parseIpAddrJson(t, 'f'),
    ),
    jsonTarget('ip -j route', [text('text/ip-route.json'), text('text/ip-6-route.json')], (t) =>
      parseIpRouteJson(t, 'f'),
    ),
    jsonTarget(
      'ip -j route show table local',
      [text('routes/gce-guest-agent.local.v4.json'), text('routes/gce-guest-agent.local.v6.json')],
      (t) => localRoutesOf(t, 'f', 4),
    ),
    jsonTarget('cluster file', CLUSTER_FILES.map(text), (t) => {
      const c = classifyDocuments(parseJsonDocuments(t));
      return buildClusterView(c.objects, { nodeName: 'node-a', warnings: c.warnings });
    }),
    jsonTarget('watch line', watchLines(), (t) => {
      const e = parseWatchLine(t);
      if (typeof e !== 'object' || !e) return e;
      // What the reflector does with it: the kind's parser (a FieldError is a clear error).
      const kind = (e.object as { kind?: unknown } | null)?.kind;
      const p =
        typeof kind === 'string' && Object.hasOwn(KIND_PARSER, kind)
          ? parsers[KIND_PARSER[kind as keyof typeof KIND_PARSER]]
          : undefined;
      return p?.({ origin: 'watch', object: e.object });
    }),
    jsonTarget(
      'bundle manifest',
      [
        JSON.stringify({
          format: 'clbprobe-bundle/1',
          clbprobeVersion: '0.1.0',
          nodeName: 'node-a',
          hostname: 'node-a',
          kernel: '6.1.0',
          startedAt: '2026-01-01T00:00:00Z',
          endedAt: '2026-01-01T00:00:02Z',
          kubeProxy: { mode: 'ipvs', source: '--proxy-mode flag', pid: 1, args: ['--proxy-mode=ipvs'] },
          files: [
            { file: 'ip-addr.json', command: 'ip -j -d addr', exitStatus: 0, durationMs: 3, size: 100 },
            { command: 'ipvsadm-save -n', exitStatus: null, durationMs: 1, error: 'not found', skipped: true },
          ],
        }),
      ],
      (t) => parseManifest(t, 'manifest.json', []),
    ),
    jsonTarget(
      'bundle dns-lookups.json',
      [text('dns/dns-lookups.lab.json'), text('dns/dns-lookups.lab-servfail.json')],
      (t) => parseDnsLookups(t, 'dns-lookups.json'),
    ),
    jsonTarget(
      'evidence request',
      ['{"service":"lab/web"}', '{"service":"lab/web","port":80,"watchS":30}'],
      parseEvidenceRequest,
    ),
    jsonTarget('evidence answer line', evidenceAnswers, (t) => textLine(parseEvidenceLine(t))),
    {
      name: 'kubeconfig',
      seeds: KUBECONFIGS,
      mutate: (s, rng) => mutateText(s as string, rng, KUBECONFIGS),
      run: (t) => {
        writeFileSync(kubePath, t);
        return loadApiTarget(kubePath, {});
      },
    },
  ];
}

/** JavaScript's own errors: a parser that lets one out has a bug. */
const ipvsSets = parseIpsetSave(text('nat/ipvs-1.28.ipset.save'), 'ipset save').sets;

/**
 * kube-proxy's facts from the nat table reader (nat-rules.ts) over the whole output and over the
 * nat lines the agent keeps as the output streams by (nat-lines.ts), cut into chunks of 1 to 61
 * bytes; input that is no save output is refused with a clear error.
 */
function natFacts(t: string, sets: Parameters<typeof natRulesFacts>[1]): unknown {
  const bytes = Buffer.from(t);
  const facts = natRulesFacts(
    [new NatRules(bytes, { source: 'f', family: 4, filterChains: FILTER_DROP_CHAINS })],
    sets,
  );
  // A line past the bound is refused by the streamed read alone, by design (read-lines.test.ts).
  if (!t.split('\n').some((l) => Buffer.byteLength(l) > NAT_LINE_MAX_BYTES))
    natRulesFacts([streamedRules(bytes)], sets);
  return facts;
}

function streamedRules(bytes: Buffer): NatRules {
  const store = new NatLineStore(NAT_LINE_MAX_BYTES, FILTER_DROP_CHAINS);
  const split = new LineSplitter(NAT_LINE_MAX_BYTES, (buf, start, end, lineNo, terminated) =>
    store.line(buf, start, end, lineNo, terminated),
  );
  const size = (bytes.length % 61) + 1;
  for (let at = 0; at < bytes.length; at += size) split.push(bytes.subarray(at, at + size));
  split.end();
  store.end();
  return new NatRules(store, { source: 'f', family: 4, filterChains: FILTER_DROP_CHAINS });
}

const BUG = [TypeError, RangeError, ReferenceError, SyntaxError, EvalError, URIError];

export interface FuzzResult {
  name: string;
  cases: number;
  /** Clear errors (the parser refused the input, as it should for bad input). */
  refused: number;
  /** Crashes counted; the first 20 kept with their input. */
  crashCount: number;
  crashes: { case: number; error: string; input: string }[];
  slow: { case: number; ms: number }[];
  ms: number;
}

/** Told after each case (its number and time in ms) and after each slow case; for a long run's progress. */
export interface FuzzProgress {
  case?(i: number, ms: number): void;
  slow?(i: number, ms: number, input: string | Buffer): void;
}

/** Runs `cases` cases of one target: each seed as it is, then mutations of them. */
export function fuzzOne(t: FuzzTarget, cases: number, seed = 1, progress: FuzzProgress = {}): FuzzResult {
  const rng = new Rng(seed);
  const r: FuzzResult = { name: t.name, cases: 0, refused: 0, crashCount: 0, crashes: [], slow: [], ms: 0 };
  const t0 = performance.now();
  for (let i = 0; i < cases; i++) {
    const input = i < t.seeds.length ? t.seeds[i]! : t.mutate(rng.pick(t.seeds), rng);
    const c0 = performance.now();
    try {
      t.run(input);
    } catch (e) {
      if (!(e instanceof Error) || BUG.some((B) => e.constructor === B) || !e.message) {
        r.crashCount++;
        if (r.crashes.length < 20) {
          const shown = typeof input === 'string' ? input.slice(0, 400) : input.subarray(0, 200).toString('hex');
          r.crashes.push({
            case: i,
            error:
              e instanceof Error
                ? `${e.constructor.name}: ${e.message}\n${e.stack?.split('\n').slice(1, 4).join('\n')}`
                : String(e),
            input: shown,
          });
        }
      } else r.refused++;
    }
    let ms = performance.now() - c0;
    // A pause of the machine (GC, a loaded shared box) is not the parser's: slow only if it is
    // slow again, as a quadratic path is every time.
    for (let again = 0; again < 2 && ms > SLOW_MS; again++) {
      const a0 = performance.now();
      try {
        t.run(input);
      } catch {
        // counted above
      }
      ms = Math.min(ms, performance.now() - a0);
    }
    if (ms > SLOW_MS) {
      r.slow.push({ case: i, ms: Math.round(ms) });
      progress.slow?.(i, ms, input);
    }
    r.cases++;
    progress.case?.(i, ms);
  }
  r.ms = Math.round(performance.now() - t0);
  return r;
}
