// iproute2 JSON parsers: `ip -j [-d] addr` → AddressSnapshot, `ip -j route` → routes, uplink and pod-CIDR candidates.
// Several documents per file are accepted; a bad item warns, a file that is not an array of ip objects throws.
import { JsonSyntaxError, parseJsonDocuments } from '../cluster/json-docs.js';
import { IFA_FLAG_NAMES, interfaceOrder, SCOPE_NAMES } from '../kernel/addresses.js';
import { canonicalIP, ipFamily } from '../kernel/ip.js';
import type { AddressSnapshot, Family, InterfaceAddress, NetInterface } from '../kernel/types.js';
import { KUBE_IPVS_IFNAME } from '../model/kube-proxy.js';
import { BundleParseError } from './errors.js';

/** ip's scope names, as the kernel reader names them. */
const SCOPE_TEXTS = new Map([...SCOPE_NAMES.values()].map((name) => [String(name), name]));

export interface Parsed<T> {
  value: T;
  warnings: string[];
}

/** ip -j prints each IFA_F_* flag as a boolean key, homeaddress as 'home' and permanent as the absence of 'dynamic'. */
const JSON_FLAG: Record<string, string> = { homeaddress: 'home' };

/** The items of every JSON array in the file, each with its position for messages. */
function jsonItems(text: string, file: string, what: string): { item: Record<string, unknown>; at: string }[] {
  let docs: unknown[];
  try {
    docs = parseJsonDocuments(text);
  } catch (e) {
    if (e instanceof JsonSyntaxError)
      throw new BundleParseError(
        file,
        e.line,
        `not valid JSON (column ${e.column}): ${e.reason}; want \`${what}\` output`,
      );
    throw e;
  }
  return docs.flatMap((doc, d) => {
    if (!Array.isArray(doc))
      throw new BundleParseError(file, 1, `document ${d + 1} is not a JSON array; want \`${what}\` output`);
    return doc.map((item: unknown, i) => ({
      item: isRecord(item) ? item : {},
      at: `${file}: ${docs.length > 1 ? `document ${d + 1} ` : ''}item [${i}]`,
    }));
  });
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

class ItemError extends Error {}

/** fn's result; an ItemError is a warning (`at: message; skipped`) and undefined, anything else is thrown. */
function unlessBad<T>(warnings: string[], at: string, skipped: string, fn: () => T): T | undefined {
  try {
    return fn();
  } catch (e) {
    if (!(e instanceof ItemError)) throw e;
    warnings.push(`${at}: ${e.message}; ${skipped}`);
    return undefined;
  }
}

function str(o: Record<string, unknown>, key: string): string | undefined {
  const v = o[key];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw new ItemError(`"${key}" is not a string`);
  return v;
}

function reqStr(o: Record<string, unknown>, key: string): string {
  const v = str(o, key);
  if (v === undefined) throw new ItemError(`no "${key}"`);
  return v;
}

function int(o: Record<string, unknown>, key: string): number | undefined {
  const v = o[key];
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0)
    throw new ItemError(`"${key}" is not a non-negative integer`);
  return v;
}

function ip(v: string, key: string): string {
  if (ipFamily(v) === 0) throw new ItemError(`"${key}" ${JSON.stringify(v)} is not an IP address`);
  return canonicalIP(v);
}

/** `ip -j addr` or `ip -j -d addr` (the latter also gives interface kinds: bridge, veth, dummy). */
export function parseIpAddrJson(text: string, file: string): Parsed<AddressSnapshot> {
  const warnings: string[] = [];
  const interfaces: NetInterface[] = [];
  const masters = new Map<NetInterface, string>();
  for (const { item, at } of jsonItems(text, file, 'ip -j -d addr')) {
    const iface = unlessBad(warnings, at, 'interface skipped', () => {
      const link = linkOf(item);
      const master = str(item, 'master');
      if (master !== undefined) masters.set(link, master);
      const infos = item.addr_info ?? [];
      if (!Array.isArray(infos)) throw new ItemError('"addr_info" is not an array');
      for (const [j, info] of infos.entries()) {
        const address = unlessBad(warnings, `${at} (${link.name}) addr_info[${j}]`, 'address skipped', () => {
          if (!isRecord(info)) throw new ItemError('not an object');
          // `ip addr` prints an empty object for an address family filtered out.
          return Object.keys(info).length === 0 ? undefined : addressOf(info);
        });
        if (address) link.addresses.push(address);
      }
      return link;
    });
    if (iface) interfaces.push(iface);
  }
  const indexOf = new Map(interfaces.map((i) => [i.name, i.index]));
  for (const [iface, name] of masters) {
    const idx = indexOf.get(name);
    if (idx !== undefined) iface.master = idx;
  }
  interfaces.sort(interfaceOrder);
  return { value: { interfaces }, warnings };
}

function linkOf(item: Record<string, unknown>): NetInterface {
  const index = int(item, 'ifindex');
  if (index === undefined) throw new ItemError('no "ifindex"');
  const name = reqStr(item, 'ifname');
  const flags = item.flags;
  if (flags !== undefined && !Array.isArray(flags)) throw new ItemError('"flags" is not an array');
  const iface: NetInterface = {
    index,
    name,
    up: (flags ?? []).includes('UP'),
    mtu: int(item, 'mtu') ?? 0,
    isKubeIpvs: name === KUBE_IPVS_IFNAME,
    addresses: [],
  };
  const kind = isRecord(item.linkinfo) ? str(item.linkinfo, 'info_kind') : undefined;
  if (kind !== undefined) iface.kind = kind;
  const mac = str(item, 'address');
  if (mac !== undefined && item.link_type !== 'loopback' && item.link_type !== 'none') iface.mac = mac;
  return iface;
}

function addressOf(item: Record<string, unknown>): InterfaceAddress {
  const fam = reqStr(item, 'family');
  if (fam !== 'inet' && fam !== 'inet6') throw new ItemError(`family ${JSON.stringify(fam)} is not inet or inet6`);
  const address = ip(reqStr(item, 'local'), 'local');
  const family: Family = fam === 'inet' ? 4 : 6;
  if (ipFamily(address) !== family) throw new ItemError(`${address} is not an ${fam} address`);
  const prefixLen = int(item, 'prefixlen');
  if (prefixLen === undefined || prefixLen > (family === 4 ? 32 : 128))
    throw new ItemError('"prefixlen" missing or out of range');
  const scopeText = str(item, 'scope') ?? 'global';
  const named = SCOPE_TEXTS.get(scopeText);
  const scope = named ?? (/^\d+$/.test(scopeText) ? Number(scopeText) : 'global');
  const flags: string[] = IFA_FLAG_NAMES.filter((f) => f !== 'permanent' && item[JSON_FLAG[f] ?? f] === true);
  if (item.dynamic !== true) flags.push('permanent');
  const out: InterfaceAddress = { family, address, prefixLen, scope, flags };
  const label = str(item, 'label');
  if (label !== undefined) out.label = label;
  return out;
}

export interface RouteInfo {
  family: Family;
  /** 'default', or a prefix 'a.b.c.d/n' (host routes get /32 or /128). */
  dst: string;
  /** Output device (of the first next hop for multipath routes). */
  dev?: string;
  gateway?: string;
  prefsrc?: string;
  /** 'unicast' unless ip printed another type (local, broadcast, blackhole, unreachable, ...). */
  type: string;
  protocol?: string;
  scope?: string;
  table?: string;
  metric?: number;
}

export interface RouteSnapshot {
  routes: RouteInfo[];
  /** IPv4 default-route interface: the node's uplink towards the VPC. */
  uplink?: string;
  /** IPv6 default-route interface. */
  uplink6?: string;
  /** Pod-CIDR candidates: connected prefixes off uplink/lo/kube-ipvs0 (a CNI bridge) and blackholes (Calico IPAM). */
  podCidrRoutes: RouteInfo[];
}

/** `ip -j route` and/or `ip -6 -j route`; `family` decides dev-only default routes (no gateway to tell). */
export function parseIpRouteJson(text: string, file: string, family?: Family): Parsed<RouteInfo[]> {
  const warnings: string[] = [];
  const routes = jsonItems(text, file, 'ip -j route').flatMap(
    ({ item, at }) => unlessBad(warnings, at, 'route skipped', () => routeOf(item, family)) ?? [],
  );
  return { value: routes, warnings };
}

function routeOf(item: Record<string, unknown>, familyHint: Family | undefined): RouteInfo {
  const dstText = reqStr(item, 'dst');
  let dev = str(item, 'dev');
  let gateway = str(item, 'gateway');
  const hop: unknown = Array.isArray(item.nexthops) ? item.nexthops[0] : undefined;
  if (dev === undefined && isRecord(hop)) {
    dev = str(hop, 'dev');
    gateway ??= str(hop, 'gateway');
  }
  const prefsrc = str(item, 'prefsrc');
  let dst = 'default';
  let family: Family | undefined;
  if (dstText !== 'default') {
    const [addr, len, extra] = dstText.split('/');
    const fam = ipFamily(addr ?? '');
    const max = fam === 4 ? 32 : 128;
    if (fam === 0 || extra !== undefined || (len !== undefined && (!/^\d+$/.test(len) || Number(len) > max))) {
      throw new ItemError(`"dst" ${JSON.stringify(dstText)} is not a prefix`);
    }
    family = fam;
    dst = `${canonicalIP(addr!)}/${len ?? max}`;
  }
  const gw = gateway !== undefined ? ip(gateway, 'gateway') : undefined;
  family ??= (gw ? ipFamily(gw) : prefsrc ? ipFamily(prefsrc) : familyHint) as Family | undefined;
  if (family === undefined)
    throw new ItemError(
      'cannot tell the family of a default route without a gateway ' +
        '(pass it by file name: ip-route.json or ip6-route.json)',
    );
  const r: RouteInfo = { family, dst, type: str(item, 'type') ?? 'unicast' };
  if (dev !== undefined) r.dev = dev;
  if (gw !== undefined) r.gateway = gw;
  if (prefsrc !== undefined) r.prefsrc = ip(prefsrc, 'prefsrc');
  for (const k of ['protocol', 'scope', 'table'] as const) {
    const v = str(item, k);
    if (v !== undefined) r[k] = v;
  }
  const metric = int(item, 'metric');
  if (metric !== undefined) r.metric = metric;
  return r;
}

const NOT_POD_DEVICES = new Set(['lo', KUBE_IPVS_IFNAME]);

/** Uplinks and pod CIDR candidates of a route list (main table routes only). */
export function summarizeRoutes(routes: RouteInfo[]): RouteSnapshot {
  const main = routes.filter((r) => r.table === undefined || r.table === 'main');
  const defaultDev = (fam: Family): string | undefined =>
    main
      .filter((r) => r.family === fam && r.dst === 'default' && r.type === 'unicast' && r.dev)
      .sort((a, b) => (a.metric ?? 0) - (b.metric ?? 0))[0]?.dev;
  const uplink = defaultDev(4);
  const uplink6 = defaultDev(6);
  const podCidrRoutes = main.filter((r) => {
    if (r.dst === 'default') return false;
    if (r.type === 'blackhole' || r.type === 'unreachable') return true;
    if (r.type !== 'unicast' || r.gateway || !r.dev || NOT_POD_DEVICES.has(r.dev)) return false;
    if (r.dev === uplink || r.dev === uplink6) return false;
    // IPv6 link-local prefixes are on every interface.
    return !(r.family === 6 && r.dst.startsWith('fe80:'));
  });
  return {
    routes,
    ...(uplink ? { uplink } : {}),
    ...(uplink6 ? { uplink6 } : {}),
    podCidrRoutes,
  };
}
