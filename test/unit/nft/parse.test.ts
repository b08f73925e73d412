import { describe, expect, it } from 'vitest';
import { MAX_NFT_JSON_BYTES, NftParseError, parseNftJson, renderElement } from '../../../src/kernel/nft/parse.js';
import { nftFixture } from './fixtures.js';

const V134 = nftFixture('kube-proxy-v1.34.ip.json');
/** The rule lines of `nft list table` text (inside chain blocks, without the base-chain `type ...` line). */
const listedRules = (list: string): string[] => {
  const out: string[] = [];
  let inChain = false;
  for (const raw of list.split('\n')) {
    const l = raw.trim();
    if (l.startsWith('chain ')) inChain = true;
    else if (l === '}') inChain = false;
    else if (inChain && l && !l.startsWith('type ') && !l.startsWith('comment ')) out.push(l);
  }
  return out;
};

describe('parseNftJson on real `nft -j list table ip kube-proxy` output (nft 1.0.6)', () => {
  const d = parseNftJson(V134, 'kube-proxy-v1.34.ip.json');
  const t = d.tables[0]!;

  it('reads the table, its base chains with hook and priority, sets and maps', () => {
    expect(d.warnings).toEqual([]);
    expect(d.version).toBe('1.0.6');
    expect(d.tables).toHaveLength(1);
    expect(t).toMatchObject({ family: 'ip', name: 'kube-proxy' });
    expect(t.chains.find((c) => c.name === 'filter-output-pre-dnat')).toMatchObject({
      type: 'filter',
      hook: 'output',
      prio: -110,
    });
    expect(t.chains.find((c) => c.name === 'filter-output')).toMatchObject({ type: 'filter', hook: 'output', prio: 0 });
    expect(t.chains.find((c) => c.name === 'nat-postrouting')).toMatchObject({
      type: 'nat',
      hook: 'postrouting',
      prio: 100,
    });
    const svcIps = t.sets.find((s) => s.name === 'service-ips')!;
    expect(svcIps).toMatchObject({
      kind: 'map',
      type: ['ipv4_addr', 'inet_proto', 'inet_service'],
      mapType: 'verdict',
    });
    expect(svcIps.elements.map(renderElement)).toContain(
      '203.0.113.11 . tcp . 80 : goto external-WEZGB4Y6-shop/api/tcp/http',
    );
    const noEp = t.sets.find((s) => s.name === 'no-endpoint-services')!;
    expect(noEp.elements.map(renderElement)).toContain('203.0.113.12 . tcp . 80 comment "shop/far:http" : drop');
    expect(noEp.elements.map(renderElement)).toContain(
      '203.0.113.13 . tcp . 80 comment "shop/none:http" : goto reject-chain',
    );
  });

  it('prints every rule exactly as `nft list table ip kube-proxy` does, in the same order', () => {
    expect(t.rules.map((r) => r.text)).toEqual(listedRules(nftFixture('kube-proxy-v1.34.ip.list')));
    const d31 = parseNftJson(nftFixture('kube-proxy-v1.31.ip.json'), 'v1.31');
    expect(d31.tables[0]!.rules.map((r) => r.text)).toEqual(listedRules(nftFixture('kube-proxy-v1.31.ip.list')));
  });

  it('keeps the parsed parts the analysis needs (matches, verdicts, vmaps, nat)', () => {
    const short = t.rules.find((r) => r.comment === 'short-circuit pod traffic')!;
    expect(short.matches).toEqual([{ left: 'ip saddr', op: '==', right: '10.244.0.0/16' }]);
    expect(short.verdict).toMatchObject({ kind: 'goto' });
    const services = t.rules.find((r) => r.chain === 'services')!;
    expect(services.vmap).toMatchObject({ key: 'ip daddr . meta l4proto . th dport', map: '@service-ips' });
    expect(t.rules.find((r) => r.nat?.kind === 'dnat')!.nat).toMatchObject({
      addr: expect.stringMatching(/^10\.244\./),
      port: 8080,
    });
    expect(t.rules.find((r) => r.chain === 'mark-for-masquerade')!.setsMark).toBe(true);
  });

  it('reads an IPv6 table (dnat to [addr]:port, ip6 matches)', () => {
    const d6 = parseNftJson(nftFixture('kube-proxy-v1.34.ip6.json'), 'v6');
    expect(d6.warnings).toEqual([]);
    const t6 = d6.tables[0]!;
    expect(t6.family).toBe('ip6');
    expect(t6.rules.map((r) => r.text)).toContain('meta l4proto tcp dnat to [fd00:10:244:2::5]:8080');
  });
});

describe('parseNftJson on cut and malformed input', () => {
  it('output cut in the middle keeps every complete item and says where it was cut', () => {
    const cut = V134.slice(0, Math.floor(V134.length * 0.6));
    const d = parseNftJson(cut, 'cut.json');
    const whole = parseNftJson(V134, 'whole.json').tables[0]!;
    const t = d.tables[0]!;
    expect(d.warnings).toHaveLength(1);
    expect(d.warnings[0]).toMatch(/^cut\.json: output ends inside item \d+ .*truncated; \d+ complete items kept$/);
    expect(t.chains.length + t.rules.length + t.sets.length).toBeGreaterThan(0);
    expect(t.chains.length + t.rules.length + t.sets.length).toBeLessThan(
      whole.chains.length + whole.rules.length + whole.sets.length,
    );
    // What was kept is exactly the start of the whole listing.
    expect(t.chains).toEqual(whole.chains.slice(0, t.chains.length));
  });

  it('cut inside a string keeps the items before it', () => {
    const at = V134.indexOf('short-circuit pod traffic') + 5;
    const d = parseNftJson(V134.slice(0, at), 'cut.json');
    expect(d.tables[0]!.sets.length).toBeGreaterThan(0);
    expect(d.warnings[0]).toMatch(/truncated/);
  });

  it('one bad item among good ones is a warning naming its position; the rest are read', () => {
    const doc = JSON.parse(V134) as { nftables: unknown[] };
    const i = doc.nftables.findIndex((x) => (x as { rule?: unknown }).rule !== undefined);
    (doc.nftables[i] as { rule: { expr?: unknown } }).rule.expr = 'not a list';
    doc.nftables.splice(3, 0, 42, { map: { family: 'ip', table: 'kube-proxy', name: 'bad', elem: 'x' } });
    const d = parseNftJson(JSON.stringify(doc), 'bad.json');
    expect(d.warnings).toEqual([
      'bad.json: item 3: not an object',
      'bad.json: item 4 (map bad): "elem" is not a list',
      `bad.json: item ${i + 2} (rule): "expr" missing or not a list`,
    ]);
    const whole = parseNftJson(V134, 'w').tables[0]!;
    expect(d.tables[0]!.rules).toHaveLength(whole.rules.length - 1);
  });

  it('syntax damage in one item (not at the end) loses only that item', () => {
    const at = V134.indexOf('{"chain":');
    const broken = `${V134.slice(0, at)}{"chain": {"family": "ip",, }}${V134.slice(V134.indexOf('}}', at) + 2)}`;
    const d = parseNftJson(broken, 'broken.json');
    expect(d.warnings).toHaveLength(1);
    expect(d.warnings[0]).toMatch(/^broken\.json: item \d+: not valid JSON/);
    expect(d.tables[0]!.chains.length).toBe(parseNftJson(V134, 'w').tables[0]!.chains.length - 1);
  });

  it('rejects what is not an nft listing with a clear error', () => {
    expect(() => parseNftJson('', 'e')).toThrow(new NftParseError('e', 'empty output'));
    expect(() => parseNftJson('Error: No such file or directory', 'x')).toThrow(/^x: not JSON nft output/);
    expect(() => parseNftJson('{"rules": []}', 'y')).toThrow('y: not an nft JSON listing (no "nftables" array)');
    expect(() => parseNftJson('x'.repeat(MAX_NFT_JSON_BYTES + 1), 'big')).toThrow(/more than the/);
  });

  it('an empty listing (nft without kube-proxy tables) is no tables and no warnings', () => {
    const d = parseNftJson(
      '{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}}]}',
      'ruleset',
    );
    expect(d).toMatchObject({ tables: [], warnings: [], version: '1.0.6' });
  });
});
