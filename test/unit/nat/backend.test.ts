import { describe, expect, it } from 'vitest';
import { chooseBackend } from '../../../src/kernel/nat/backend.js';
import { fixture } from './fixtures.js';

const OLD = fixture('iptables-1.21-legacy.v4.save'); // has KUBE-KUBELET-CANARY
const NEW = fixture('iptables-1.29-nft.v4.save'); // has KUBE-IPTABLES-HINT
const PLAIN = `*filter\n:INPUT ACCEPT [0:0]\n${'-A INPUT -s 198.51.100.0/24 -j DROP\n'.repeat(300)}COMMIT\n`;
const stripHints = (t: string) => t.replace(/^:KUBE-(IPTABLES-HINT|KUBE-KUBELET-CANARY|KUBELET-CANARY) .*\n/gm, '');

describe('chooseBackend (iptables-wrappers logic)', () => {
  it('prefers nft when kubelet hint chains are there, even with more legacy rules', () => {
    const c = chooseBackend({ texts: [PLAIN] }, { texts: [NEW] });
    expect(c.backend).toBe('nft');
    expect(c.reason).toMatch(/KUBE-IPTABLES-HINT\/KUBE-KUBELET-CANARY chain is in the nft tables/);
    expect(c.legacy).toEqual({ ruleLines: 300, kubeRuleLines: 0, kubeletChains: false });
    expect(c.nft).toMatchObject({ kubeletChains: true });
    expect(c.nft.kubeRuleLines).toBeGreaterThan(50);
  });

  it('picks legacy when only the legacy tables hold the kubelet chains', () => {
    const c = chooseBackend({ texts: [OLD] }, { texts: [PLAIN] });
    expect(c.backend).toBe('legacy');
    expect(c.reason).toMatch(/in the legacy tables/);
  });

  it('without hint chains, picks the backend with more rule lines, nft on a tie', () => {
    expect(chooseBackend({ texts: [stripHints(OLD)] }, { texts: [''] })).toMatchObject({ backend: 'legacy' });
    expect(chooseBackend({ texts: [stripHints(OLD)] }, { texts: [''] }).reason).toMatch(
      /^no kubelet hint chain; legacy holds more rules: legacy 75 rule lines/,
    );
    expect(chooseBackend({ texts: [''] }, { texts: [stripHints(OLD)] }).backend).toBe('nft');
    expect(chooseBackend({ texts: [''] }, { texts: [''] }).reason).toMatch(/equal rule counts, nft is the default/);
  });

  it('picks the only backend that could be read', () => {
    const c = chooseBackend({ texts: [], error: 'iptables-legacy-save not found in PATH' }, { texts: [''] });
    expect(c).toMatchObject({
      backend: 'nft',
      reason: 'only nft could be read (legacy: iptables-legacy-save not found in PATH)',
    });
    expect(c.legacy.error).toBe('iptables-legacy-save not found in PATH');
    expect(chooseBackend({ texts: [''] }, { texts: [], error: 'x' }).backend).toBe('legacy');
  });
});
