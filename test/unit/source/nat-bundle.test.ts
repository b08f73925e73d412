// The nat source from a bundle: a save output the bundle lacks leaves that family's kube-proxy rules unknown (so
// its LB IPs get no "leaves for the LB" verdict), while both outputs present read as before.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { BundleFiles } from '../../../src/bundle/files.js';
import { kubeNatFacts } from '../../../src/kubeproxy/facts.js';
import { nat } from '../../../src/source/nat.js';
import { fixture } from '../nat/fixtures.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function bundle(files: Record<string, string>): BundleFiles {
  const dir = mkdtempSync(join(tmpdir(), 'cbi-bundle-'));
  dirs.push(dir);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return new BundleFiles(dir, Object.keys(files));
}

describe('nat.fromBundle', () => {
  it('an ip6tables-save output the bundle lacks: IPv6 rules unknown, IPv4 facts as read', () => {
    const r = nat.fromBundle!(bundle({ 'iptables-nft-save.txt': fixture('iptables-1.29-nft.v4.save') }));
    expect(r.state).toBe('up');
    const value = r.state === 'up' ? r.value : undefined;
    const why = 'ip6tables-nft-save.txt not in the bundle (see src/bundle/README.md for the command that makes it)';
    expect(value?.unreadable).toEqual({ 6: why });
    const facts = kubeNatFacts(value);
    expect(facts.mode).toBe('iptables');
    expect(facts.unreadable).toEqual({ 6: why });
  });

  it('both outputs present: nothing unknown', () => {
    const r = nat.fromBundle!(
      bundle({
        'iptables-nft-save.txt': fixture('iptables-1.29-nft.v4.save'),
        'ip6tables-nft-save.txt': fixture('iptables-1.29-nft.v6.save'),
      }),
    );
    const value = r.state === 'up' ? r.value : undefined;
    expect(value?.v6).toBeDefined();
    expect(value).not.toHaveProperty('unreadable');
    expect(kubeNatFacts(value)).not.toHaveProperty('unreadable');
  });
});
