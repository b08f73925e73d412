// Typed reads of untrusted Kubernetes JSON; errors name the field path so a bad object becomes one warning.
import { isIP } from 'node:net';

export type Obj = Record<string, unknown>;

/** A field with the wrong type or value; `message` is the full explanation with the field path. */
export class FieldError extends Error {
  override readonly name = 'FieldError';
}

export function isObj(value: unknown): value is Obj {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export const isStr = (v: unknown): v is string => typeof v === 'string';

/** An array whose every item passes `each`. */
export const arrOf = (v: unknown, each: (x: unknown) => boolean): boolean => Array.isArray(v) && v.every(each);

/** Optional object: undefined/null → undefined. */
export function optObj(value: unknown, path: string): Obj | undefined {
  if (value === undefined || value === null) return undefined;
  if (!isObj(value)) throw new FieldError(`${path} is not an object`);
  return value;
}

export function optStr(value: unknown, path: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') throw new FieldError(`${path} is not a string`);
  return value;
}

export function reqStr(value: unknown, path: string): string {
  const s = optStr(value, path);
  if (s === undefined || s === '') throw new FieldError(`${path} is missing`);
  return s;
}

export function optInt(value: unknown, path: string, min = 0, max = Number.MAX_SAFE_INTEGER): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value)) throw new FieldError(`${path} is not a number`);
  if (value < min || value > max) throw new FieldError(`${path} is out of range (${value})`);
  return value;
}

export function optBool(value: unknown, path: string): boolean | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'boolean') throw new FieldError(`${path} is not a boolean`);
  return value;
}

/** Optional array: undefined/null → []. */
export function optArr(value: unknown, path: string): unknown[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new FieldError(`${path} is not a list`);
  return value;
}

export function strArr(value: unknown, path: string): string[] {
  return optArr(value, path).map((x, i) => reqStr(x, `${path}[${i}]`));
}

/** String map such as metadata.annotations / labels. */
export function strMap(value: unknown, path: string): Record<string, string> {
  const o = optObj(value, path) ?? {};
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(o)) {
    if (typeof val !== 'string') throw new FieldError(`${path}[${JSON.stringify(k)}] is not a string`);
    out[k] = val;
  }
  return out;
}

/** A DNS name as compared: lower case, without the root's trailing dot. */
export const dnsName = (name: string): string => name.trim().toLowerCase().replace(/\.$/, '');

/** An IP in the kernel readers' text form (RFC 5952 IPv6) so Service IPs compare equal to conntrack tuples. */
export function canonicalIp(value: unknown, path: string): string {
  const s = reqStr(value, path);
  const family = isIP(s);
  if (family === 4) return s;
  // isIP takes a zone ("fe80::1%eth0"), which no Kubernetes field may hold and URL refuses.
  if (family === 6 && !s.includes('%')) {
    const text = new URL(`http://[${s}]/`).hostname.slice(1, -1);
    // WHATWG URL prints IPv4-mapped addresses in hex; the kernel readers keep them dotted.
    const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(text);
    if (!mapped) return text;
    const hi = parseInt(mapped[1]!, 16);
    const lo = parseInt(mapped[2]!, 16);
    return `::ffff:${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  throw new FieldError(`${path} is not an IP address (${JSON.stringify(s)})`);
}
