import { describe, expect, it } from 'vitest';
import { diagnose } from '../../../src/detect/index.js';
import { renderJson, renderText, wantColor } from '../../../src/detect/render.js';
import { loadCase } from './fixture-bundle.js';

describe('render', () => {
  const result = diagnose(loadCase('tke-ipvs-unbound-l4-loop').input);

  it('groups by Service, most severe Service first, with evidence and fix', () => {
    const text = renderText(result, { color: false, nodeName: 'node-a' });
    expect(text).not.toMatch(/\x1b\[/);
    expect(text.indexOf('Service shop/api')).toBeLessThan(text.indexOf('Service shop/web'));
    expect(text).toMatch(/ACTIVE L4-loop +TCP 80 \(http\)/);
    expect(text).toContain(
      'conntrack outbound: tcp      6 117 SYN_SENT src=10.244.1.7 dst=192.0.2.20 sport=41822 dport=80 [UNREPLIED]',
    );
    expect(text).toMatch(/fix: Call the Service by its DNS name/);
    expect(text).toMatch(/^clbprobe diagnose — node node-a: 2 active/);
  });

  it('colours only a TTY without NO_COLOR', () => {
    expect(wantColor({ isTTY: true }, {})).toBe(true);
    expect(wantColor({ isTTY: true }, { NO_COLOR: '1' })).toBe(false);
    expect(wantColor({ isTTY: false }, {})).toBe(false);
    expect(renderText(result, { color: true })).toMatch(/\x1b\[1;31mACTIVE/);
  });

  it('JSON carries findings and warnings', () => {
    const j = JSON.parse(renderJson(result, 'node-a')) as { node: string; findings: unknown[]; warnings: string[] };
    expect(j.node).toBe('node-a');
    expect(j.findings).toHaveLength(result.findings.length);
  });
});
