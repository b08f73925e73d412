// runNftLists through the real runCommand, with a stand-in `nft` on PATH that answers as nft 1.0 does: a missing
// kube-proxy table is an absence (another proxy mode, or single-stack), any other failure keeps nft's own text.
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { nftSnapshotOf, nftSnapshotOfRuleset, runNftLists } from '../../../src/kernel/nft/read.js';
import { kubeNatFacts } from '../../../src/kubeproxy/facts.js';
import { nft } from '../../../src/source/nft.js';
import { nftFixture } from './fixtures.js';

const savedPath = process.env.PATH;
const dirs: string[] = [];

afterEach(() => {
  process.env.PATH = savedPath;
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Puts an `nft` first on PATH that runs `script` (POSIX sh; $4 is the family of `-j list table FAMILY NAME`). */
function fakeNft(script: string): void {
  const dir = mkdtempSync(join(tmpdir(), 'clbprobe-fake-nft-'));
  dirs.push(dir);
  const file = join(dir, 'nft');
  writeFileSync(file, `#!/bin/sh\n${script}\n`);
  chmodSync(file, 0o755);
  process.env.PATH = `${dir}:${savedPath}`;
}

const NO_TABLE_IP = `Error: No such file or directory
list table ip kube-proxy
                 ^^^^^^^^^^`;

describe('runNftLists', () => {
  it('reads a missing table as absent, not as a failure', async () => {
    fakeNft(`if [ "$4" = ip ]; then printf '%s\\n' '${NO_TABLE_IP}' >&2; exit 1; fi
echo '{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"table": {"family": "ip6", "name": "kube-proxy"}}]}'`);
    const lists = await runNftLists();
    expect(lists.ip).toEqual({ ok: false, reason: 'no such table', absent: true });
    expect(lists.ip6.ok).toBe(true);
    const { snapshot, error } = nftSnapshotOf(lists);
    expect(error).toBeUndefined();
    expect(snapshot?.absent).toEqual(['ip']);
    expect(snapshot?.tables.map((t) => [t.family, t.name])).toEqual([['ip6', 'kube-proxy']]);
  });

  it("keeps any other failure's stderr text, and is not absent", async () => {
    fakeNft(`echo "Error: Could not process rule: Protocol not supported (family $4)" >&2; exit 1`);
    const lists = await runNftLists();
    expect(lists.ip).toEqual({
      ok: false,
      reason: 'Error: Could not process rule: Protocol not supported (family ip)',
    });
    expect(lists.ip6).toEqual({
      ok: false,
      reason: 'Error: Could not process rule: Protocol not supported (family ip6)',
    });
    expect(nftSnapshotOf(lists)).toEqual({
      error:
        'nft -j list table ip kube-proxy: Error: Could not process rule: Protocol not supported (family ip); ' +
        'nft -j list table ip6 kube-proxy: Error: Could not process rule: Protocol not supported (family ip6)',
    });
  });
});

describe('the nft source with one family unreadable', () => {
  const ip6Listing = join(import.meta.dirname, '../../fixtures/nft/kube-proxy-v1.34.ip6.json');

  it('single-stack: an ip listing that fails, beside no ip6 table, is down with the reason, not absent', async () => {
    fakeNft(`if [ "$4" = ip ]; then echo '{"nftables": [{"metainfo"'; exit 0; fi
echo 'Error: No such file or directory' >&2; exit 1`);
    const r = await nft.live!({}).read();
    expect(r).toMatchObject({ state: 'down', reason: expect.stringMatching(/^nft -j list table ip kube-proxy: /) });
    expect(r).not.toHaveProperty('value');
  });

  it('dual-stack: ip fails, ip6 is read: down with the ip6 table, and IPv4 rules are unknown, not absent', async () => {
    fakeNft(`if [ "$4" = ip ]; then echo 'Error: Could not process rule: Device or resource busy' >&2; exit 1; fi
cat '${ip6Listing}'`);
    const r = await nft.live!({}).read();
    const reason = 'nft -j list table ip kube-proxy: Error: Could not process rule: Device or resource busy';
    expect(r).toMatchObject({ state: 'down', reason });
    const snap = r.state === 'down' ? r.value : undefined;
    expect(snap?.tables.map((t) => t.family)).toEqual(['ip6']);
    expect(snap?.unreadable).toEqual({ ip: reason });
    const facts = kubeNatFacts(undefined, snap);
    expect(facts.mode).toBe('nftables');
    expect(facts.unreadable).toEqual({ 4: reason });
  });

  it('an ip6 listing that fails beside a read ip table is a note: IPv6 rules unknown', () => {
    const { snapshot } = nftSnapshotOf({
      ip: { ok: true, stdout: nftFixture('kube-proxy-v1.34.ip.json') },
      ip6: { ok: false, reason: 'timed out after 60000 ms' },
    });
    expect(snapshot?.unreadable).toEqual({ ip6: 'nft -j list table ip6 kube-proxy: timed out after 60000 ms' });
    expect(kubeNatFacts(undefined, snapshot).unreadable).toEqual({
      6: 'nft -j list table ip6 kube-proxy: timed out after 60000 ms',
    });
  });
});

describe("a bundle's cut ruleset", () => {
  it('a table the cut may have taken is unreadable, not absent', () => {
    const items = (name: string): unknown[] => (JSON.parse(nftFixture(name)) as { nftables: unknown[] }).nftables;
    const ip6 = items('kube-proxy-v1.34.ip6.json').filter((i) => !Object.hasOwn(i as object, 'metainfo'));
    const whole = JSON.stringify({ nftables: [...items('kube-proxy-v1.34.ip.json'), ...ip6] });
    const at = whole.indexOf(JSON.stringify(ip6[0])) + 10;
    const snap = nftSnapshotOfRuleset(whole.slice(0, at), 'nft-ruleset.json');
    expect(snap.tables.map((t) => t.family)).toEqual(['ip']);
    expect(snap.absent).toEqual([]);
    expect(snap.unreadable).toEqual({ ip6: 'nft-ruleset.json: cut short before any table ip6 kube-proxy' });
    expect(kubeNatFacts(undefined, snap).unreadable).toEqual({ 6: snap.unreadable?.ip6 });
    // Whole, the same listing without an ip6 table says it is absent.
    expect(nftSnapshotOfRuleset(nftFixture('kube-proxy-v1.34.ip.json'), 'nft-ruleset.json').absent).toEqual(['ip6']);
  });
});
