// The HTML page of a diagnosis, from the fixture bundles' real findings: each
// active loop carries its path (client → VIP → node:NodePort → server, and the
// reply that skips the LB) and the page draws it; everything outside is escaped.
import { describe, expect, it } from 'vitest';
import { diagnose } from '../../../src/detect/index.js';
import { escapeHtml, renderHtml } from '../../../src/detect/render-html.js';
import { loadCase } from './fixture-bundle.js';

const page = (name: string) => {
  const { input } = loadCase(name);
  const result = diagnose(input);
  return {
    result,
    html: renderHtml(result, { nodeName: 'node-a', generatedAt: '2026-11-24T00:00:00Z', source: `bundle ${name}` }),
  };
};

describe('diagnose --html', () => {
  it('an active L4 loop carries its path from its own conntrack pair', () => {
    const { result } = page('tke-ipvs-unbound-l4-loop');
    const f = result.findings.find((x) => x.mechanism === 'L4-loop' && x.severity === 'active')!;
    expect(f.path).toBeDefined();
    const p = f.path!;
    expect(p.hops.map((h) => h.role)).toEqual(['client pod', 'LB VIP', 'node NodePort', 'server pod']);
    // The path is the evidence's first pair: the same addresses as the conntrack lines.
    expect(f.evidence[0]).toContain(`src=${p.hops[0]!.address.split(':')[0]}`);
    expect(f.evidence[0]).toContain(`dport=${p.hops[1]!.address.split(':').pop()}`);
    expect(p.legs.map((l) => l.conntrack)).toEqual([
      f.evidence[0]!.replace(/^conntrack [^:]*: /, ''),
      f.evidence[1]!.replace(/^conntrack [^:]*: /, ''),
    ]);
    expect(p.reply.from).toBe(p.hops[3]!.address);
    expect(p.reply.to).toBe(p.hops[0]!.address);
  });

  it('draws every active loop and shows findings, evidence and fix', () => {
    const { result, html } = page('tke-ipvs-unbound-l4-loop');
    const loops = result.findings.filter((f) => f.path);
    expect(loops.length).toBeGreaterThan(0);
    expect(html.match(/<svg class="path"/g)?.length).toBe(loops.length);
    for (const f of result.findings) {
      expect(html).toContain(escapeHtml(`Service ${f.service.namespace}/${f.service.name}`));
      expect(html).toContain(escapeHtml(f.summary));
      if (f.severity !== 'info') expect(html).toContain(escapeHtml(f.remedy));
    }
    for (const h of loops[0]!.path!.hops) expect(html).toContain(escapeHtml(h.address));
    expect(html).toContain('skips the LB');
    // Self-contained: nothing fetched, nothing run.
    expect(html).not.toMatch(/<script|<link|src="http|href="http/i);
  });

  it('L7 and direct-pod loops are drawn with their own roles; config-only findings are not', () => {
    const l7 = page('l7-ingress-loop').result.findings.find(
      (f) => f.mechanism === 'L7-loop' && f.severity === 'active',
    )!;
    expect(l7.path!.hops.map((h) => h.role).slice(0, 3)).toEqual(['client pod', 'Ingress VIP', 'node NodePort']);
    const direct = page('direct-pod-loop').result.findings.find(
      (f) => f.mechanism === 'direct-pod' && f.severity === 'active',
    )!;
    expect(direct.path!.hops.map((h) => h.role)).toEqual(['client pod', 'LB VIP', 'server pod (LB target)']);
    const config = page('tke-ipvs-unbound-config-only').result.findings;
    expect(config.some((f) => f.path)).toBe(false);
  });

  it('escapes what comes from the cluster', () => {
    const { result } = page('tke-ipvs-unbound-l4-loop');
    const evil = structuredClone(result);
    evil.findings[0]!.service.name = '<img src=x onerror=alert(1)>';
    evil.findings[0]!.summary = '</pre><script>alert(1)</script>';
    evil.warnings.push('"quoted" & <b>bold</b>');
    const html = renderHtml(evil, { nodeName: '<node>', generatedAt: 'now', source: 'test' });
    expect(html).not.toContain('<img src=x');
    expect(html).not.toContain('<script>');
    expect(html).toContain('&lt;node&gt;');
    expect(html).toContain('&quot;quoted&quot; &amp; &lt;b&gt;bold&lt;/b&gt;');
  });
});
