// Text outputs show the control characters of cluster- and network-controlled strings instead of
// obeying them: a tenant's annotation must not clear an on-call engineer's screen in `diagnose`,
// nor can a hostname, reason or rule do so in `snapshot`, nor an agent's line in `evidence`.
import { describe, expect, it } from 'vitest';
import type { EvidenceLine } from '../../../src/agent/evidence.js';
import { textLine } from '../../../src/cli/evidence-text.js';
import { renderSnapshot } from '../../../src/cli/snapshot-render.js';
import { diagnose } from '../../../src/detect/index.js';
import { renderText } from '../../../src/detect/render.js';
import { printable } from '../../../src/printable.js';
import type { NodeSnapshot } from '../../../src/source/node-snapshot.js';
import { loadCase } from './fixture-bundle.js';

/** Clears the screen, homes the cursor, prints a fake verdict, recolours (8-bit CSI), reverses (bidi), sets the title. */
const ATTACK = '\x1b[2J\x1b[H0 active\r\n\x9b32m\u202eOK\x1b]0;pwned\x07';
/** Anything a terminal acts on. */
const CONTROL = /[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

describe('printable', () => {
  it('shows each control character as an escape and leaves other text alone', () => {
    expect(printable(ATTACK)).toBe('\\x1b[2J\\x1b[H0 active\\x0d\\x0a\\x9b32m\\u202eOK\\x1b]0;pwned\\x07');
    expect(printable('shop/café 日本 a\\b 10.0.0.1:80')).toBe('shop/café 日本 a\\b 10.0.0.1:80');
  });
});

describe('diagnose text', () => {
  const result = diagnose(loadCase('tke-ipvs-unbound-l4-loop').input);
  const [first] = result.findings;
  const hostile = {
    ...result,
    findings: [
      {
        ...first!,
        service: { ...first!.service, name: `web${ATTACK}` },
        summary: `summary ${ATTACK}`,
        evidence: [`annotation: ${ATTACK}`],
        remedy: `fix ${ATTACK}`,
      },
      ...result.findings.slice(1),
    ],
    warnings: [`warning ${ATTACK}`],
  };

  it('without colour, carries no control character but the newlines between its lines', () => {
    const text = renderText(hostile, { color: false, nodeName: `node${ATTACK}` });
    for (const line of text.split('\n')) expect(line).not.toMatch(CONTROL);
    expect(text).toContain('annotation: \\x1b[2J\\x1b[H0 active\\x0d\\x0a');
    expect(text).toContain(`Service ${first!.service.namespace}/web\\x1b[2J`);
    expect(text.match(/^clbprobe diagnose/gm)).toHaveLength(1);
  });

  it('with colour, every escape sequence is one of its own colour codes', () => {
    const text = renderText(hostile, { color: true });
    const withoutColours = text.replace(/\x1b\[[0-9;]*m/g, '');
    for (const line of withoutColours.split('\n')) expect(line).not.toMatch(CONTROL);
  });
});

describe('evidence and snapshot text', () => {
  it('evidence lines', () => {
    const lines: EvidenceLine[] = [
      {
        type: 'entry',
        class: 'client',
        live: false,
        line: `tcp ${ATTACK}`,
        firstSeen: '2026-11-28T17:00:00Z',
      } as unknown as EvidenceLine,
      { type: 'error', message: ATTACK },
      {
        type: 'service',
        node: `n1${ATTACK}`,
        service: { namespace: 'lab', name: `web${ATTACK}`, vips: [], ports: [], endpoints: [] },
      } as unknown as EvidenceLine,
    ];
    for (const l of lines) {
      expect(textLine(l)).not.toMatch(CONTROL);
      expect(textLine(l)).toContain('\\x1b[2J');
    }
  });

  it('snapshot lines', () => {
    const snap = {
      hostname: `node${ATTACK}`,
      kernel: '6.1',
      takenAt: '2026-11-28T17:00:00Z',
      sources: [{ source: 'addresses', available: false, reason: `refused ${ATTACK}` }],
      addresses: { interfaces: [{ name: `eth0${ATTACK}`, kind: 'veth', up: true, isKubeIpvs: false, addresses: [] }] },
    } as unknown as NodeSnapshot;
    const lines = renderSnapshot(snap);
    for (const line of lines) expect(line).not.toMatch(CONTROL);
    expect(lines.join('\n')).toContain('eth0\\x1b[2J');
  });
});
