// Bundles' `ipvsadm -Ln` variants and `ipvsadm-save -n` as IpvsSnapshots whose `missing` names what each lacks;
// without --exact numbers are rounded (K/M/G/T = 10^3^k), and addresses must be numeric (-n).
import { canonicalIP, ipFamily } from '../ip.js';
import { LineParseError } from '../nat/errors.js';
import type {
  Family,
  IpvsForward,
  IpvsRealServer,
  IpvsSnapshot,
  IpvsStats,
  IpvsTunnel,
  IpvsVirtualServer,
} from '../types.js';
import { ALL_GROUPS, type IpvsFieldGroup, mergeIpvsSnapshots, newRealServer, zeroStats } from './merge.js';
import { defaultNetmask, FORWARDS, forwardName, TUNNEL_CHECKSUMS } from './uapi.js';

export class IpvsadmParseError extends LineParseError {
  override name = 'IpvsadmParseError';
}

/** Parses and merges any mix of ipvsadm -Ln variants and ipvsadm-save -n outputs (source: a file or command). */
export function parseIpvsadm(inputs: { source: string; text: string }[]): IpvsSnapshot {
  return mergeIpvsSnapshots(
    inputs.map(({ source, text }) =>
      /^\s*IP Virtual Server/.test(text) ? parseIpvsadmList(text, source) : parseIpvsadmSave(text, source),
    ),
  );
}

type Fail = (message: string) => never;

function failer(source: string, line: number): Fail {
  return (message) => {
    throw new IpvsadmParseError(source, line, message);
  };
}

/** "1.2.3.4:80" or "[2001:db8::1]:80". */
function hostPort(s: string, fail: Fail): { address: string; port: number; family: Family } {
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(s) ?? /^([^:[\]]+):(\d+)$/.exec(s);
  const fam = m ? ipFamily(m[1]!) : 0;
  if (!m || !fam) fail(`expected a numeric address:port, got ${JSON.stringify(s)} (use ipvsadm -n)`);
  const port = Number(m[2]);
  if (port > 65535) fail(`port ${port} out of range`);
  return { address: canonicalIP(m[1]!), port, family: fam };
}

const UNITS: Record<string, number> = { '': 1, K: 1e3, M: 1e6, G: 1e9, T: 1e12 };

function count(s: string | undefined, what: string, fail: Fail): number {
  const m = s === undefined ? null : /^(\d+)([KMGT]?)$/.exec(s);
  if (!m) fail(`${what}: expected a number, got ${JSON.stringify(s ?? '')}`);
  return Number(m[1]) * UNITS[m[2]!]!;
}

const PROTOCOLS: Record<string, IpvsVirtualServer['protocol']> = { TCP: 'TCP', UDP: 'UDP', SCTP: 'SCTP' };
const CHECKSUMS: Record<string, IpvsTunnel['checksum']> = { '-c': 'nocsum', '+c': 'csum', 'r+c': 'remcsum' };

function newService(family: Family): IpvsVirtualServer {
  return { family, protocol: 0, scheduler: '', flags: [], timeoutS: 0, realServers: [] };
}

/** A real server's address in vs, with its family only when it differs from the service's. */
function realAddress(
  vs: IpvsVirtualServer,
  hp: ReturnType<typeof hostPort>,
): Pick<IpvsRealServer, 'address' | 'port' | 'family'> {
  return hp.family === vs.family ? { address: hp.address, port: hp.port } : hp;
}

/** Flags in the order the kernel bits (and thus the netlink reader) give them. */
function orderFlags(flags: Set<string>): string[] {
  const head = ['persistent', 'one-packet'].filter((f) => flags.has(f));
  return [...head, ...[...flags].filter((f) => !head.includes(f))];
}

// ---- ipvsadm -Ln ----------------------------------------------------------

type Column = (target: Record<string, unknown>, token: string, fail: Fail) => void;

const num =
  (key: string): Column =>
  (t, tok, fail) => {
    t[key] = count(tok, key, fail);
  };
const stat =
  (key: keyof IpvsStats): Column =>
  (t, tok, fail) => {
    t.stats ??= zeroStats();
    (t.stats as IpvsStats)[key] = count(tok, key, fail);
  };

/** ipvsadm column heading → where its value goes and which field group it provides. */
const COLUMNS: Record<string, { set: Column; group: IpvsFieldGroup }> = {
  Forward: {
    group: 'forward',
    set: (t, tok, fail) => {
      t.forward =
        FORWARDS.find((f) => forwardName(f) === tok) ?? fail(`unknown forwarding method ${JSON.stringify(tok)}`);
    },
  },
  TunnelInfo: { group: 'tunnel', set: (t, tok, fail) => tunnelInfo(t, tok, fail) },
  Weight: { group: 'weight', set: num('weight') },
  ActiveConn: { group: 'conns', set: num('activeConns') },
  InActConn: { group: 'conns', set: num('inactiveConns') },
  PersistConn: { group: 'persistentConns', set: num('persistentConns') },
  Uthreshold: { group: 'thresholds', set: num('upperThreshold') },
  Lthreshold: { group: 'thresholds', set: num('lowerThreshold') },
  Conns: { group: 'stats', set: stat('conns') },
  InPkts: { group: 'stats', set: stat('inPkts') },
  OutPkts: { group: 'stats', set: stat('outPkts') },
  InBytes: { group: 'stats', set: stat('inBytes') },
  OutBytes: { group: 'stats', set: stat('outBytes') },
  CPS: { group: 'rates', set: stat('cps') },
  InPPS: { group: 'rates', set: stat('inPps') },
  OutPPS: { group: 'rates', set: stat('outPps') },
  InBPS: { group: 'rates', set: stat('inBps') },
  OutBPS: { group: 'rates', set: stat('outBps') },
};

/** --tun-info: "n/a", "ipip", "gue:PORT:-c", "gre:+c" (-c none, +c checksum, r+c remote checksum). */
function tunnelInfo(t: Record<string, unknown>, tok: string, fail: Fail): void {
  if (tok === 'n/a') return;
  const [type, ...rest] = tok.split(':');
  const checksum = rest.length && rest[rest.length - 1]!.endsWith('c') ? CHECKSUMS[rest.pop()!] : 'nocsum';
  const port = type === 'gue' && rest.length === 1 ? count(rest[0], 'tunnel port', fail) : 0;
  if ((type !== 'ipip' && type !== 'gue' && type !== 'gre') || !checksum || rest.length > (type === 'gue' ? 1 : 0)) {
    fail(`unrecognised tunnel info ${JSON.stringify(tok)}`);
  }
  t.tunnel = { type, port, checksum } satisfies IpvsTunnel;
}

function columns(headings: string[], lineNo: number, source: string): { set: Column; group: IpvsFieldGroup }[] {
  return headings.map((h) => COLUMNS[h] ?? failer(source, lineNo)(`unknown column ${JSON.stringify(h)}`));
}

/** "wrr (sh-port) persistent 600 mask 255.255.255.0 ops pe sip" → the config fields. */
function serviceConfig(vs: IpvsVirtualServer, tokens: string[], fail: Fail): void {
  const flags = new Set<string>();
  vs.scheduler = tokens[0] ?? fail('missing scheduler');
  for (let i = 1; i < tokens.length; i++) {
    const tok = tokens[i]!;
    if (tok.startsWith('(') && tok.endsWith(')')) {
      for (const f of tok.slice(1, -1).split(',')) flags.add(f);
    } else if (tok === 'persistent') {
      flags.add('persistent');
      vs.timeoutS = count(tokens[++i], 'persistent timeout', fail);
    } else if (tok === 'mask') {
      vs.netmask = tokens[++i] ?? fail('mask without a value');
    } else if (tok === 'ops') {
      flags.add('one-packet');
    } else if (tok === 'pe') {
      vs.peName = tokens[++i] ?? fail('pe without a name');
    } else {
      fail(`unexpected ${JSON.stringify(tok)} after the scheduler`);
    }
  }
  vs.flags = orderFlags(flags);
  vs.netmask ??= defaultNetmask(vs.family);
}

/** "TCP  1.2.3.4:80 ..." / "FWM  42 IPv6 ..." → the service and the tokens after its identity. */
function serviceHead(tokens: string[], fail: Fail): { vs: IpvsVirtualServer; rest: string[] } {
  const [prot, id] = tokens;
  if (prot === 'FWM') {
    const v6 = tokens[2] === 'IPv6';
    const vs = newService(v6 ? 6 : 4);
    vs.fwmark = count(id, 'firewall mark', fail);
    return { vs, rest: tokens.slice(v6 ? 3 : 2) };
  }
  const vs = newService(4);
  vs.protocol = PROTOCOLS[prot ?? ''] ?? fail(`unknown protocol ${JSON.stringify(prot ?? '')}`);
  const hp = hostPort(id ?? '', fail);
  Object.assign(vs, { family: hp.family, address: hp.address, port: hp.port });
  return { vs, rest: tokens.slice(2) };
}

/** Any `ipvsadm -L -n` listing. Header lines tell which columns the service and real-server lines carry. */
export function parseIpvsadmList(text: string, source = 'ipvsadm -Ln'): IpvsSnapshot {
  const lines = text.split(/\r?\n/);
  const h1 = lines[0]?.trim() ?? '';
  const h2 = (lines[1] ?? '').trim().split(/\s+/);
  const h3 = (lines[2] ?? '').trim().split(/\s+/);
  if (!h1.startsWith('IP Virtual Server')) failer(source, 1)('expected the "IP Virtual Server version ..." header');
  if (h2[0] !== 'Prot' || h2[1] !== 'LocalAddress:Port') failer(source, 2)('expected "Prot LocalAddress:Port ..."');
  if (h3[0] !== '->' || h3[1] !== 'RemoteAddress:Port') failer(source, 3)('expected "-> RemoteAddress:Port ..."');
  // Default and --tun-info: "Scheduler Flags" on line 2, real-server columns on line 3.
  // --stats/--rate: counter columns on line 2 for both service and real-server lines.
  // --thresholds/--persistent-conn: line 2 columns for real servers; services show their config.
  const schedHeading = h2[2] === 'Scheduler' && h2[3] === 'Flags' && h2.length === 4;
  const line2 = schedHeading ? [] : columns(h2.slice(2), 2, source);
  const destCols = h3.length > 2 ? columns(h3.slice(2), 3, source) : line2;
  const withConfig = schedHeading || !line2.every((c) => c.group === 'stats' || c.group === 'rates');
  const serviceCols = withConfig ? [] : line2;
  const present = new Set<IpvsFieldGroup>(destCols.map((c) => c.group));
  if (withConfig) present.add('config');

  const out: IpvsVirtualServer[] = [];
  for (let i = 3; i < lines.length; i++) {
    const line = lines[i]!;
    if (!line.trim()) continue;
    const fail: Fail = failer(source, i + 1);
    const tokens = line.trim().split(/\s+/);
    if (tokens[0] === '->') {
      const vs = out[out.length - 1] ?? fail('real server line before any service line');
      const rs = newRealServer(realAddress(vs, hostPort(tokens[1] ?? '', fail)));
      fillColumns(rs as unknown as Record<string, unknown>, destCols, tokens.slice(2), fail);
      if (present.has('thresholds')) {
        rs.upperThreshold ??= 0;
        rs.lowerThreshold ??= 0;
      }
      vs.realServers.push(rs);
    } else {
      const { vs, rest } = serviceHead(tokens, fail);
      if (withConfig) serviceConfig(vs, rest, fail);
      else fillColumns(vs as unknown as Record<string, unknown>, serviceCols, rest, fail);
      out.push(vs);
    }
  }
  return { virtualServers: out, missing: ALL_GROUPS.filter((g) => !present.has(g)) };
}

function fillColumns(target: Record<string, unknown>, cols: { set: Column }[], tokens: string[], fail: Fail): void {
  if (tokens.length !== cols.length) fail(`expected ${cols.length} columns after the address, got ${tokens.length}`);
  for (const [i, c] of cols.entries()) c.set(target, tokens[i]!, fail);
}

// ---- ipvsadm-save -n ------------------------------------------------------

/** ipvsadm's long options by the short spelling ipvsadm-save prints, so each option is looked up once. */
const SHORT: Record<string, string> = {
  '--tcp-service': '-t',
  '--udp-service': '-u',
  '--fwmark-service': '-f',
  '--scheduler': '-s',
  '--persistent': '-p',
  '--ops': '-o',
  '--sched-flags': '-b',
  '--netmask': '-M',
  '--real-server': '-r',
  '--weight': '-w',
  '--u-threshold': '-x',
  '--l-threshold': '-y',
  '--masquerading': '-m',
  '--gatewaying': '-g',
  '--ipip': '-i',
};
const SERVICE_OPTS: Record<string, IpvsVirtualServer['protocol'] | 'FWM'> = {
  '-t': 'TCP',
  '-u': 'UDP',
  '--sctp-service': 'SCTP',
  '-f': 'FWM',
};
const SAVE_FORWARDS: Record<string, IpvsForward> = { '-m': 'masq', '-g': 'route', '-i': 'tunnel' };
const SAVE_CHECKSUMS = Object.fromEntries(TUNNEL_CHECKSUMS.map((c) => [`--tun-${c}`, c]));
/** Options that take no value. */
const SAVE_FLAGS = new Set([...Object.keys(SAVE_FORWARDS), ...Object.keys(SAVE_CHECKSUMS), '-6', '-o']);
const REAL_SERVER_OPTS = new Set([
  ...Object.keys(SAVE_FORWARDS),
  ...Object.keys(SAVE_CHECKSUMS),
  ...['-6', '-r', '-w', '-x', '-y', '--tun-type', '--tun-port'],
]);

/** `ipvsadm-save -n` (also `ipvsadm -Sn`): one -A line per service, one -a line per real server. */
export function parseIpvsadmSave(text: string, source = 'ipvsadm-save -n'): IpvsSnapshot {
  const services = new Map<string, IpvsVirtualServer>();
  let thresholds = false;
  for (const [idx, line] of text.split(/\r?\n/).entries()) {
    const tokens = line.trim().split(/\s+/).filter(Boolean);
    if (!tokens.length || tokens[0]!.startsWith('#')) continue;
    const fail: Fail = failer(source, idx + 1);
    const [cmd, ...args] = tokens;
    if (cmd !== '-A' && cmd !== '-a') fail(`expected -A or -a, got ${JSON.stringify(cmd)}`);
    const o = new Map<string, string>();
    // Options by their short spelling, and as the line spelled them for messages.
    const spelling = new Map<string, string>();
    const asWritten = (options: Iterable<string>) => [...options].map((k) => spelling.get(k) ?? k).join(' ');
    let svc: { key: string; kind: string; value: string } | undefined;
    for (let i = 0; i < args.length; i++) {
      const written = args[i]!;
      const a = SHORT[written] ?? written;
      spelling.set(a, written);
      const value = SAVE_FLAGS.has(a) ? '' : (args[++i] ?? fail(`${written} without a value`));
      if (a in SERVICE_OPTS) svc = { key: `${a} ${value}`, kind: SERVICE_OPTS[a] as string, value };
      else o.set(a, value);
    }
    if (!svc) fail('no service (-t, -u, --sctp-service or -f)');
    const v6 = o.has('-6');
    const key = `${svc.key}${v6 ? ' -6' : ''}`;
    if (cmd === '-A') {
      const vs = newService(v6 ? 6 : 4);
      if (svc.kind === 'FWM') vs.fwmark = count(svc.value, 'firewall mark', fail);
      else {
        const hp = hostPort(svc.value, fail);
        Object.assign(vs, { protocol: svc.kind, family: hp.family, address: hp.address, port: hp.port });
      }
      saveServiceOptions(vs, o, fail);
      if (o.size) fail(`unexpected option(s) on an -A line: ${asWritten(o.keys())}`);
      services.set(key, vs);
      continue;
    }
    const vs = services.get(key) ?? fail(`real server for ${svc.key} before its -A line`);
    const unknown = [...o.keys()].filter((k) => !REAL_SERVER_OPTS.has(k));
    if (unknown.length) fail(`unexpected option(s) on an -a line: ${asWritten(unknown)}`);
    const hp = hostPort(o.get('-r') ?? fail('-a without -r'), fail);
    const fwd = [...o.keys()].filter((k) => k in SAVE_FORWARDS);
    if (fwd.length > 1) fail(`several forwarding methods: ${asWritten(fwd)}`);
    const weight = count(o.get('-w') ?? '1', 'weight', fail);
    // ipvsadm's default is direct routing.
    const rs = newRealServer(realAddress(vs, hp), weight, SAVE_FORWARDS[fwd[0] ?? '-g']!);
    const x = o.get('-x');
    const y = o.get('-y');
    if (x !== undefined || y !== undefined) thresholds = true;
    rs.upperThreshold = count(x ?? '0', 'upper threshold', fail);
    rs.lowerThreshold = count(y ?? '0', 'lower threshold', fail);
    if (rs.forward === 'tunnel') {
      const type = o.get('--tun-type') ?? 'ipip';
      if (type !== 'ipip' && type !== 'gue' && type !== 'gre') fail(`unknown tunnel type ${JSON.stringify(type)}`);
      const cs = [...o.keys()].filter((k) => k in SAVE_CHECKSUMS);
      rs.tunnel = {
        type,
        port: count(o.get('--tun-port') ?? '0', 'tunnel port', fail),
        checksum: SAVE_CHECKSUMS[cs[0] ?? '--tun-nocsum']!,
      };
    }
    vs.realServers.push(rs);
  }
  const missing: IpvsFieldGroup[] = ['conns', 'persistentConns', 'stats', 'rates'];
  if (!thresholds) missing.splice(2, 0, 'thresholds');
  return { virtualServers: [...services.values()], missing };
}

/** Reads an -A line's options, taking each out of o so that what is left is unknown to it. */
function saveServiceOptions(vs: IpvsVirtualServer, o: Map<string, string>, fail: Fail): void {
  const take = (option: string): string | undefined => {
    const value = o.get(option);
    o.delete(option);
    return value;
  };
  const flags = new Set<string>();
  vs.scheduler = take('-s') ?? 'wlc'; // ipvsadm's default scheduler
  const p = take('-p');
  if (p !== undefined) {
    flags.add('persistent');
    vs.timeoutS = count(p, 'persistent timeout', fail);
  }
  if (take('-o') !== undefined) flags.add('one-packet');
  for (const f of (take('-b') ?? '').split(',').filter(Boolean)) flags.add(f);
  vs.flags = orderFlags(flags);
  vs.netmask = take('-M') ?? defaultNetmask(vs.family);
  const pe = take('--pe');
  if (pe !== undefined) vs.peName = pe;
  take('-6');
}
