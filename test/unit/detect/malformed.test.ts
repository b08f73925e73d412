// Broken inputs: a clear message naming the file and line, and the rest of
// the diagnosis still runs.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadClusterFile } from '../../../src/cluster/file.js';
import { diagnose } from '../../../src/detect/index.js';
import { diagnoseInputOf } from '../../../src/detect/input.js';
import { parseIptablesSave } from '../../../src/kernel/nat/iptables-save.js';
import { BUNDLES, loadCase } from './fixture-bundle.js';

const dir = mkdtempSync(join(tmpdir(), 'cbd-malformed-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('malformed inputs', () => {
  it('a truncated iptables-save: warnings name the line, findings from the other sources remain', () => {
    const { input } = loadCase('tke-ipvs-unbound-l4-loop');
    const text = readFileSync(join(BUNDLES, '../nat/ipvs-1.28.v4.save'), 'utf8');
    const cut = text.slice(0, text.indexOf('-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ') + 20);
    const v4 = parseIptablesSave(cut, { source: 'bundle/iptables-save.txt', family: 4 });
    const node = { ...input.node, nat: { ...input.node.nat!, v4 } };
    const r = diagnose({ ...diagnoseInputOf(node, input.cluster, v4.warnings), conntrack: input.conntrack! });
    expect(r.warnings.join('\n')).toMatch(/bundle\/iptables-save\.txt:\d+/);
    expect(r.findings.some((f) => f.mechanism === 'L4-loop' && f.severity === 'active')).toBe(true);
  });

  it('a Service object without a name is skipped with a warning; the others are diagnosed', () => {
    const list = JSON.parse(readFileSync(join(BUNDLES, 'tke-ipvs-unbound-l4-loop/cluster.json'), 'utf8')) as {
      items: { metadata: Record<string, unknown> }[];
    };
    delete list.items[0]!.metadata.name;
    const path = join(dir, 'cluster.json');
    writeFileSync(path, JSON.stringify(list, null, 4));
    const { input } = loadCase('tke-ipvs-unbound-l4-loop');
    const r = diagnose({
      ...diagnoseInputOf(input.node, loadClusterFile(path, { nodeName: 'node-a' })),
      conntrack: input.conntrack!,
    });
    expect(r.warnings.join('\n')).toMatch(/name/);
    expect(
      r.findings.some((f) => f.service.name === 'api' && f.mechanism === 'L4-loop' && f.severity === 'active'),
    ).toBe(true);
    expect(r.findings.some((f) => f.service.name === 'web')).toBe(false);
  });

  it('broken cluster JSON: the error names file, line and column', () => {
    const path = join(dir, 'broken.json');
    writeFileSync(path, '{\n  "items": [\n    {"kind": "Service",,}\n  ]\n}\n');
    expect(() => loadClusterFile(path)).toThrow(new RegExp(`${path}:3:\\d+`));
  });
});
