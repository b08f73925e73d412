// dns-lookups.json: the resolver's answers for hostname-only LBs at collect time, one lookup per line so a cut file
// still yields every complete lookup; a bad lookup is a warning naming its index.
import { isIP } from 'node:net';
import { errText } from '../errors.js';
import type { HostnameLookup } from '../model/hostname-lookup.js';

/** What `collect` writes as the file's "format". */
const DNS_LOOKUPS_FORMAT = 'clbprobe-dns-lookups/1';
/** More names than the agent ever resolves (256 by default): past this the rest is dropped, with a warning. */
const MAX_BUNDLE_LOOKUPS = 4096;
/** Addresses kept per name (a DNS answer over UDP holds far fewer). */
export const MAX_LOOKUP_ADDRESSES = 256;
const MAX_TEXT = 1024;

export function formatDnsLookups(lookups: readonly HostnameLookup[]): string {
  const lines = lookups.map((l) => JSON.stringify(l));
  return `{"format":${JSON.stringify(DNS_LOOKUPS_FORMAT)},"lookups":[\n${lines.join(',\n')}\n]}\n`;
}

/** Throws only when nothing in the file is a lookup (not JSON at all, or no lookups list). */
export function parseDnsLookups(text: string, path: string): { lookups: HostnameLookup[]; warnings: string[] } {
  const warnings: string[] = [];
  const items = lookupItems(text, path, warnings);
  if (items.length > MAX_BUNDLE_LOOKUPS)
    warnings.push(`${path}: ${items.length} lookups, only the first ${MAX_BUNDLE_LOOKUPS} read`);
  const lookups = new Map<string, HostnameLookup>();
  for (const { at, value } of items.slice(0, MAX_BUNDLE_LOOKUPS)) {
    const l = checkLookup(value, `${path}: ${at}`, warnings);
    if (l && lookups.has(l.hostname)) warnings.push(`${path}: ${at}: ${l.hostname} listed again; the first kept`);
    else if (l) lookups.set(l.hostname, l);
  }
  return { lookups: [...lookups.values()], warnings };
}

/** The file's lookups, each with where it is; from a cut file, its lines that are whole lookups. */
function lookupItems(text: string, path: string, warnings: string[]): { at: string; value: unknown }[] {
  let whole: unknown;
  try {
    whole = JSON.parse(text);
  } catch (e) {
    const salvaged = lineItems(text);
    if (salvaged.length === 0) throw new Error(`${path}: not JSON (${errText(e)})`);
    warnings.push(`${path}: not complete JSON (cut short?): read the ${salvaged.length} complete lookup line(s)`);
    return salvaged;
  }
  const list = Array.isArray(whole) ? whole : (whole as { lookups?: unknown } | null)?.lookups;
  if (!Array.isArray(list)) throw new Error(`${path}: no "lookups" list`);
  const format = (whole as { format?: unknown }).format;
  if (format !== undefined && format !== DNS_LOOKUPS_FORMAT)
    warnings.push(
      `${path}: format ${JSON.stringify(format).slice(0, 60)}, not ${DNS_LOOKUPS_FORMAT}: read as far as it matches`,
    );
  return list.map((value, i) => ({ at: `lookups[${i}]`, value }));
}

/** Lines of a cut file that are whole lookup objects (the writer puts one per line). */
function lineItems(text: string): { at: string; value: unknown }[] {
  const out: { at: string; value: unknown }[] = [];
  for (const [i, raw] of text.split('\n').entries()) {
    const s = raw.trim().replace(/,$/, '');
    if (!s.startsWith('{"hostname"')) continue;
    try {
      out.push({ at: `line ${i + 1}`, value: JSON.parse(s) });
    } catch {
      // the cut line itself
    }
  }
  return out;
}

const text = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v.slice(0, MAX_TEXT) : undefined);

function checkLookup(item: unknown, at: string, warnings: string[]): HostnameLookup | undefined {
  if (item === null || typeof item !== 'object' || Array.isArray(item)) {
    warnings.push(`${at}: not an object; skipped`);
    return undefined;
  }
  const o = item as Record<string, unknown>;
  const hostname = text(o.hostname);
  if (!hostname || hostname.length > 253) {
    warnings.push(`${at}: no hostname; skipped`);
    return undefined;
  }
  const addresses: string[] = [];
  if (!Array.isArray(o.addresses)) warnings.push(`${at}: ${hostname}: no "addresses" list; read as none`);
  else {
    for (const a of o.addresses.slice(0, MAX_LOOKUP_ADDRESSES)) {
      // A zone ("fe80::1%eth0") is not an LB address, as everywhere else clbprobe reads addresses.
      if (typeof a === 'string' && isIP(a) !== 0 && !a.includes('%')) addresses.push(a);
      else warnings.push(`${at}: ${hostname}: ${JSON.stringify(a)?.slice(0, 60)} is not an IP address; skipped`);
    }
    if (o.addresses.length > MAX_LOOKUP_ADDRESSES)
      warnings.push(`${at}: ${hostname}: ${o.addresses.length} addresses, the first ${MAX_LOOKUP_ADDRESSES} kept`);
  }
  const l: HostnameLookup = { hostname, addresses, resolver: text(o.resolver) ?? 'unknown resolver' };
  if (typeof o.ttlS === 'number' && Number.isFinite(o.ttlS) && o.ttlS >= 0) l.ttlS = o.ttlS;
  else if (o.ttlS !== undefined)
    warnings.push(
      `${at}: ${hostname}: ttlS ${JSON.stringify(o.ttlS)?.slice(0, 40)} is not a number of seconds; ignored`,
    );
  const resolvedAt = text(o.resolvedAt);
  if (resolvedAt && !Number.isNaN(Date.parse(resolvedAt))) l.resolvedAt = resolvedAt;
  else if (o.resolvedAt !== undefined) warnings.push(`${at}: ${hostname}: resolvedAt is not a time; ignored`);
  const error = text(o.error);
  if (error) l.error = error;
  else if (o.error !== undefined) warnings.push(`${at}: ${hostname}: error is not text; ignored`);
  // A name without an answer or an error says nothing: an unresolved name, as the reader tells it.
  if (addresses.length === 0 && !l.error) l.error = 'no address in the bundle';
  return l;
}
