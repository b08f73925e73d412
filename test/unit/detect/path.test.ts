// kubeProxyPath when one family's kube-proxy rules could not be read: a VIP of that family without a rule is
// unknown, not "leaves for the LB", so no L4-loop or no-SNAT risk is claimed from rules nobody saw.
import { describe, expect, it } from 'vitest';
import { buildContext } from '../../../src/detect/context.js';
import { diagnose } from '../../../src/detect/index.js';
import { diagnoseInputOf } from '../../../src/detect/input.js';
import { kubeProxyPath } from '../../../src/detect/path.js';
import type { DiagnoseInput } from '../../../src/detect/types.js';
import { nftSnapshotOf } from '../../../src/kernel/nft/read.js';
import type { NodeSnapshot } from '../../../src/source/node-snapshot.js';
import { nftFixture } from '../nft/fixtures.js';
import { loadCase } from './fixture-bundle.js';

/** aws-nlb-hostname: shop/nlb's resolved IPv4 LB IPs match no kube-proxy rule, so they leave for the LB. */
function nlbCase(node: (n: NodeSnapshot) => NodeSnapshot): DiagnoseInput {
  const { input } = loadCase('aws-nlb-hostname');
  return { ...input, ...diagnoseInputOf(node(input.node), input.cluster) };
}

const nlbPath = (input: DiagnoseInput) => {
  const ctx = buildContext(input);
  const nlb = ctx.services.find((s) => s.name === 'nlb')!;
  return kubeProxyPath(ctx, nlb, nlb.lbIngress[0]!.ip);
};

const riskServices = (input: DiagnoseInput, mechanism: string): string[] =>
  diagnose(input)
    .findings.filter((f) => f.mechanism === mechanism && f.severity === 'risk')
    .map((f) => f.service.name);

describe('kubeProxyPath with a family whose rules could not be read', () => {
  it('iptables mode, all rules read: the unmatched IPv4 VIP leaves (the baseline)', () => {
    const input = nlbCase((n) => n);
    expect(nlbPath(input).leaves).toBe(true);
    expect(riskServices(input, 'L4-loop')).toContain('nlb');
  });

  it('nftables dual-stack, `nft list table ip kube-proxy` timed out, ip6 read: IPv4 VIPs are unknown', () => {
    const lists = nftSnapshotOf({
      ip: { ok: false, reason: 'timed out after 60000 ms' },
      ip6: { ok: true, stdout: nftFixture('kube-proxy-v1.34.ip6.json') },
    });
    const input = nlbCase(({ nat: _nat, ...n }) => ({ ...n, nft: lists.snapshot! }));
    expect(input.nat?.proxyMode).toBe('nftables');
    expect(nlbPath(input)).toEqual({
      leaves: undefined,
      evidence: [
        "kube-proxy's IPv4 rules could not be read: nft -j list table ip kube-proxy: timed out after 60000 ms",
      ],
    });
    expect(riskServices(input, 'L4-loop')).not.toContain('nlb');
  });

  it('iptables mode: an unreadable IPv6 save leaves IPv4 VIPs as read', () => {
    const input = nlbCase((n) => ({ ...n, nat: { ...n.nat!, unreadable: { 6: 'ip6tables-nft-save: timed out' } } }));
    expect(nlbPath(input).leaves).toBe(true);
  });
});
