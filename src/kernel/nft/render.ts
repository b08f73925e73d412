// libnftables JSON back into the text `nft list` prints, so evidence lines can be grepped in the user's own listing;
// kube-proxy's shapes are spelled exactly, anything else recognisably, never dropped.
import { NFT_VERDICTS, type NftMatch, type NftRule, type NftVerdict } from './types.js';

export type Json = unknown;
export type Obj = Record<string, Json>;
export const isObj = (json: Json): json is Obj => typeof json === 'object' && json !== null && !Array.isArray(json);

/** meta keys nft prints without the `meta` prefix. */
const BARE_META = new Set([
  'iif',
  'iifname',
  'oif',
  'oifname',
  'iiftype',
  'oiftype',
  'skuid',
  'skgid',
  'rtclassid',
  'cpu',
  'iifgroup',
  'oifgroup',
  'cgroup',
]);
const BINOPS = ['&', '|', '^', '<<', '>>'] as const;
const VERDICTS = new Set<string>(NFT_VERDICTS);

export function renderExpr(json: Json): string {
  if (typeof json === 'string') return json;
  if (typeof json === 'number' || typeof json === 'boolean') return String(json);
  if (json === null || json === undefined) return '';
  if (Array.isArray(json)) return `{ ${json.map(renderExpr).join(', ')} }`;
  const [k, v] = Object.entries(json)[0] ?? ['', undefined];
  const o = isObj(v) ? v : {};
  switch (k) {
    case 'payload':
      return o.protocol !== undefined
        ? `${String(o.protocol)} ${String(o.field)}`
        : `@${String(o.base)},${String(o.offset)},${String(o.len)}`;
    case 'meta':
      return BARE_META.has(String(o.key)) ? String(o.key) : `meta ${String(o.key)}`;
    case 'ct':
      return (
        `ct ${o.dir !== undefined ? `${String(o.dir)} ` : ''}` +
        `${o.family !== undefined ? `${String(o.family)} ` : ''}${String(o.key)}`
      );
    case 'fib':
      return `fib ${(Array.isArray(o.flags) ? o.flags : [o.flags]).map(String).join(' . ')} ${String(o.result)}`;
    case 'prefix':
      return `${String(o.addr)}/${String(o.len)}`;
    case 'range':
      return Array.isArray(v) ? `${renderExpr(v[0])}-${renderExpr(v[1])}` : '?';
    case 'concat':
      return Array.isArray(v) ? v.map(renderExpr).join(' . ') : '?';
    case 'set':
      return Array.isArray(v) ? `{ ${v.map(setItem).join(', ')} }` : renderExpr(v);
    case 'elem':
      return `${renderExpr(o.val)}${o.comment !== undefined ? ` comment ${quote(String(o.comment))}` : ''}`;
    case 'numgen':
      return `numgen ${String(o.mode)} mod ${String(o.mod)}${o.offset ? ` offset ${String(o.offset)}` : ''}`;
    case 'map':
      return `${renderExpr(o.key)} map ${renderExpr(o.data)}`;
    default:
      if ((BINOPS as readonly string[]).includes(k) && Array.isArray(v)) {
        const left = renderExpr(v[0]);
        return [left, ...v.slice(1).map((x) => (isMark(left) ? hex32(x) : renderExpr(x)))].join(` ${k} `);
      }
      if (VERDICTS.has(k)) return renderVerdict(verdictOf(json) ?? { kind: 'accept' });
      return `${k} ${JSON.stringify(v)}`;
  }
}

/** Set elements may be [key, value] pairs (anonymous maps) or plain keys. */
function setItem(json: Json): string {
  return Array.isArray(json) && json.length === 2
    ? `${renderExpr(json[0])} : ${renderExpr(json[1])}`
    : renderExpr(json);
}

/** nft prints packet marks as 0x%08x. */
const isMark = (text: string): boolean => text === 'meta mark' || text === 'ct mark' || text.startsWith('meta mark ');
function hex32(json: Json): string {
  return typeof json === 'number' ? `0x${json.toString(16).padStart(8, '0')}` : renderExpr(json);
}

export function quote(s: string): string {
  return `"${s.replace(/"/g, '\\"')}"`;
}

/** A verdict statement or expression ({drop: null}, {goto: {target}}), if that is what e is. */
export function verdictOf(json: Json): NftVerdict | undefined {
  if (!isObj(json)) return undefined;
  const [k, v] = Object.entries(json)[0] ?? [];
  if (!k || !VERDICTS.has(k)) return undefined;
  const kind = k as NftVerdict['kind'];
  if (kind === 'jump' || kind === 'goto') {
    const target = isObj(v) && typeof v.target === 'string' ? v.target : undefined;
    return target !== undefined ? { kind, target } : undefined;
  }
  return { kind };
}

export function renderVerdict(verdict: NftVerdict): string {
  return verdict.target !== undefined ? `${verdict.kind} ${verdict.target}` : verdict.kind;
}

/** One statement of a rule's expr list, as text, recording what the analysis needs on `r`. */
export function renderStatement(json: Json, rule: NftRule): string {
  const verdict = verdictOf(json);
  if (verdict) {
    rule.verdict = verdict;
    return renderVerdict(verdict);
  }
  if (!isObj(json)) return JSON.stringify(json);
  const [k, v] = Object.entries(json)[0] ?? ['', undefined];
  const o = isObj(v) ? v : {};
  switch (k) {
    case 'match': {
      const left = renderExpr(o.left);
      const m: NftMatch = {
        left,
        op: String(o.op ?? '=='),
        right: isMark(left) ? hex32(o.right) : renderExpr(o.right),
      };
      rule.matches.push(m);
      // nft leaves `==` out except after an expression with an operator (`meta mark & 0x4000 == 0x0`).
      const binop = isObj(o.left) && (BINOPS as readonly string[]).includes(Object.keys(o.left)[0] ?? '');
      return (m.op === '==' && !binop) || m.op === 'in' ? `${m.left} ${m.right}` : `${m.left} ${m.op} ${m.right}`;
    }
    case 'vmap': {
      const verdicts = vmapVerdicts(o.data);
      const map = typeof o.data === 'string' ? o.data : undefined;
      rule.vmap = { key: renderExpr(o.key), ...(map ? { map } : {}), verdicts };
      return `${renderExpr(o.key)} vmap ${renderExpr(o.data)}`;
    }
    case 'mangle': {
      const key = renderExpr(o.key);
      if (key === 'meta mark') rule.setsMark = true;
      return `${key} set ${renderExpr(o.value)}`;
    }
    case 'dnat':
    case 'snat': {
      const addr = o.addr !== undefined ? renderExpr(o.addr) : undefined;
      const port = typeof o.port === 'number' ? o.port : undefined;
      rule.nat = { kind: k, ...(addr !== undefined ? { addr } : {}), ...(port !== undefined ? { port } : {}) };
      const host = addr?.includes(':') && port !== undefined ? `[${addr}]` : (addr ?? '');
      return `${k} to ${host}${port !== undefined ? `:${port}` : ''}`;
    }
    case 'masquerade':
    case 'redirect': {
      rule.nat = { kind: k };
      const flags = Array.isArray(o.flags) ? o.flags : o.flags !== undefined ? [o.flags] : [];
      return [k, ...flags.map(String)].join(' ');
    }
    case 'reject':
      rule.reject = true;
      return 'reject';
    case 'counter':
      return o.packets !== undefined ? `counter packets ${String(o.packets)} bytes ${String(o.bytes)}` : 'counter';
    case 'set':
      return `${String(o.op)} ${String(o.set)} { ${renderExpr(o.elem)} }`;
    case 'log':
      return 'log';
    case 'notrack':
      return 'notrack';
    default:
      return `${k} ${JSON.stringify(v)}`;
  }
}

function vmapVerdicts(data: Json): NftVerdict[] {
  if (!isObj(data) || !Array.isArray(data.set)) return [];
  return data.set.flatMap((x) => (Array.isArray(x) ? [verdictOf(x[1])].filter((v): v is NftVerdict => !!v) : []));
}
