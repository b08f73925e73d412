// `nft -j list ...` output (libnftables-json(5)) into an NftDump. nft prints one JSON line, so a cut capture is
// salvaged item by item, the cut item and any item of unexpected shape becoming warnings that name its position.

import { errText } from '../../errors.js';
import { isObj, type Json, type Obj, quote, renderExpr, renderStatement, renderVerdict, verdictOf } from './render.js';
import type { NftChain, NftDump, NftElement, NftFamily, NftRule, NftSet, NftTable } from './types.js';
import { NFT_FAMILIES } from './types.js';

/** Bound on the JSON text, far beyond what kube-proxy's tables hold for the largest clusters. */
export const MAX_NFT_JSON_BYTES = 64 * 1024 * 1024;

export class NftParseError extends Error {
  constructor(
    readonly source: string,
    detail: string,
  ) {
    super(`${source}: ${detail}`);
    this.name = 'NftParseError';
  }
}

const FAMILIES = new Set<string>(NFT_FAMILIES);

export function parseNftJson(text: string, source: string): NftDump {
  if (text.length > MAX_NFT_JSON_BYTES)
    throw new NftParseError(source, `${text.length} bytes, more than the ${MAX_NFT_JSON_BYTES} accepted`);
  const dump: NftDump = { source, tables: [], warnings: [] };
  for (const item of topLevelItems(text, dump)) addItem(dump, item.value, item.index);
  return dump;
}

interface Item {
  value: Json;
  index: number;
}

/** The items of the top-level "nftables" array: JSON.parse when the text is whole, else item by item. */
function topLevelItems(text: string, dump: NftDump): Item[] {
  const { source } = dump;
  const trimmed = text.trim();
  if (trimmed === '') throw new NftParseError(source, 'empty output');
  try {
    const doc = JSON.parse(trimmed) as Json;
    if (!isObj(doc) || !Array.isArray(doc.nftables))
      throw new NftParseError(source, 'not an nft JSON listing (no "nftables" array)');
    return doc.nftables.map((value, index) => ({ value, index }));
  } catch (e) {
    if (e instanceof NftParseError) throw e;
    return salvage(trimmed, dump, errText(e));
  }
}

/** Splits `{"nftables": [ {...}, {...}, ...` at depth-1 commas, honouring strings; parses each piece alone. */
function salvage(text: string, dump: NftDump, why: string): Item[] {
  const { source, warnings } = dump;
  const head = /^\{\s*"nftables"\s*:\s*\[/.exec(text);
  if (!head) throw new NftParseError(source, `not JSON nft output (${why})`);
  const items: Item[] = [];
  let depth = 0;
  let inString = false;
  let start = head[0].length;
  let index = 0;
  let closed = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    else if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') {
      if (depth === 0) {
        // The closing bracket of the top-level array.
        pushPiece(text.slice(start, i), index++, items, source, warnings);
        closed = true;
        break;
      }
      depth--;
    } else if (c === ',' && depth === 0) {
      pushPiece(text.slice(start, i), index++, items, source, warnings);
      start = i + 1;
    }
  }
  if (!closed) {
    dump.cut = true;
    const rest = text.slice(start).trim();
    warnings.push(
      `${source}: output ends inside item ${index} (${rest.length} ` +
        `characters cut short): truncated; ${items.length} complete items kept`,
    );
  }
  if (closed && items.length === 0) throw new NftParseError(source, `not valid JSON (${why})`);
  return items;
}

function pushPiece(piece: string, index: number, items: Item[], source: string, warnings: string[]): void {
  if (piece.trim() === '') return;
  try {
    items.push({ value: JSON.parse(piece) as Json, index });
  } catch (e) {
    warnings.push(`${source}: item ${index}: not valid JSON (${errText(e)})`);
  }
}

function addItem(dump: NftDump, item: Json, index: number): void {
  const where = `${dump.source}: item ${index}`;
  if (!isObj(item)) {
    dump.warnings.push(`${where}: not an object`);
    return;
  }
  const [kind, body] = Object.entries(item)[0] ?? [];
  if (kind === 'metainfo') {
    if (isObj(body) && typeof body.version === 'string') dump.version = body.version;
    return;
  }
  if (!kind || !isObj(body)) {
    dump.warnings.push(`${where}: not an nft object`);
    return;
  }
  if (kind === 'table') {
    const t = tableOf(dump, body, where, true);
    if (t && body.handle !== undefined) t.handle = Number(body.handle);
    return;
  }
  if (!['chain', 'rule', 'set', 'map'].includes(kind)) return; // flowtables, counters, quotas, ...: not kube-proxy's
  const table = tableOf(dump, body, where, false);
  if (!table) return;
  try {
    if (kind === 'chain') table.chains.push(chainOf(body));
    else if (kind === 'rule') table.rules.push(ruleOf(body));
    else table.sets.push(setOf(kind as 'set' | 'map', body));
  } catch (e) {
    dump.warnings.push(`${where} (${kind}${typeof body.name === 'string' ? ` ${body.name}` : ''}): ${errText(e)}`);
  }
}

function tableOf(dump: NftDump, body: Obj, where: string, isTable: boolean): NftTable | undefined {
  const family = body.family;
  const name = isTable ? body.name : body.table;
  if (typeof family !== 'string' || !FAMILIES.has(family) || typeof name !== 'string') {
    dump.warnings.push(`${where}: no family/table name`);
    return undefined;
  }
  let t = dump.tables.find((x) => x.family === family && x.name === name);
  if (!t) {
    t = { family: family as NftFamily, name, chains: [], rules: [], sets: [] };
    dump.tables.push(t);
  }
  return t;
}

function str(obj: Obj, k: string): string {
  const v = obj[k];
  if (typeof v !== 'string') throw new Error(`"${k}" missing or not a string`);
  return v;
}

function chainOf(obj: Obj): NftChain {
  const c: NftChain = { name: str(obj, 'name') };
  if (typeof obj.handle === 'number') c.handle = obj.handle;
  if (typeof obj.type === 'string') c.type = obj.type;
  if (typeof obj.hook === 'string') c.hook = obj.hook;
  if (typeof obj.prio === 'number') c.prio = obj.prio;
  if (typeof obj.policy === 'string') c.policy = obj.policy;
  if (typeof obj.comment === 'string') c.comment = obj.comment;
  return c;
}

function ruleOf(obj: Obj): NftRule {
  const r: NftRule = { chain: str(obj, 'chain'), text: '', matches: [] };
  if (!Array.isArray(obj.expr)) throw new Error('"expr" missing or not a list');
  if (typeof obj.handle === 'number') r.handle = obj.handle;
  if (typeof obj.comment === 'string') r.comment = obj.comment;
  const parts = obj.expr.map((s) => renderStatement(s, r));
  if (r.comment !== undefined) parts.push(`comment ${quote(r.comment)}`);
  r.text = parts.join(' ');
  return r;
}

function setOf(kind: 'set' | 'map', obj: Obj): NftSet {
  const type = Array.isArray(obj.type) ? obj.type.map(String) : typeof obj.type === 'string' ? [obj.type] : [];
  const s: NftSet = { kind, name: str(obj, 'name'), type, elements: [] };
  if (typeof obj.handle === 'number') s.handle = obj.handle;
  if (kind === 'map' && obj.map !== undefined)
    s.mapType = Array.isArray(obj.map) ? obj.map.map(String).join(' . ') : String(obj.map);
  if (Array.isArray(obj.flags)) s.flags = obj.flags.map(String);
  else if (typeof obj.flags === 'string') s.flags = [obj.flags];
  if (typeof obj.timeout === 'number' && Number.isFinite(obj.timeout) && obj.timeout >= 0) s.timeout = obj.timeout;
  if (typeof obj.comment === 'string') s.comment = obj.comment;
  const elems = obj.elem === undefined ? [] : Array.isArray(obj.elem) ? obj.elem : null;
  if (elems === null) throw new Error('"elem" is not a list');
  for (const e of elems) s.elements.push(elementOf(kind, e));
  return s;
}

/** Set elements: a key; map elements: [key, value]. A key with a comment is wrapped in {elem: {val, comment}}. */
function elementOf(kind: 'set' | 'map', json: Json): NftElement {
  const [rawKey, rawValue] = kind === 'map' && Array.isArray(json) ? [json[0], json[1]] : [json, undefined];
  let key: Json = rawKey;
  let comment: string | undefined;
  if (isObj(key) && isObj(key.elem)) {
    comment = typeof key.elem.comment === 'string' ? key.elem.comment : undefined;
    key = key.elem.val;
  }
  const parts = isObj(key) && Array.isArray(key.concat) ? key.concat.map(renderExpr) : [renderExpr(key)];
  const out: NftElement = { key: parts };
  if (comment !== undefined) out.comment = comment;
  if (kind === 'map') {
    const v = verdictOf(rawValue);
    if (v) out.verdict = v;
    else if (rawValue !== undefined) out.value = renderExpr(rawValue);
  }
  return out;
}

/** An element as `nft list` prints it inside `elements = { ... }`. */
export function renderElement(element: NftElement): string {
  const key = element.key.join(' . ');
  const comment = element.comment !== undefined ? ` comment ${quote(element.comment)}` : '';
  const value = element.verdict
    ? ` : ${renderVerdict(element.verdict)}`
    : element.value !== undefined
      ? ` : ${element.value}`
      : '';
  return `${key}${comment}${value}`;
}
