// The cardinality cap covers every per-Service family a registry is given: its
// list is the families themselves, so a family added in one collector file is
// capped without a line anywhere else.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { COLLECTORS } from '../../../src/agent/metrics/list.js';
import { perServicePort, plain } from '../../../src/export/family.js';
import { createFamilyRegistry } from '../../../src/export/metrics.js';
import type { SvcPortLabels } from '../../../src/export/state.js';

const web: SvcPortLabels = { namespace: 'shop', service: 'web', port: '80', protocol: 'TCP' };
const api: SvcPortLabels = { namespace: 'shop', service: 'api', port: '443', protocol: 'TCP' };

interface State {
  endpoints: { svc: SvcPortLabels; locality: string; count: number }[];
  build: string;
}

const endpoints = perServicePort<State, State['endpoints'][number]>({
  name: 'test_service_endpoints',
  help: 'Endpoints of a Service port, by locality.',
  type: 'gauge',
  items: (s) => s.endpoints,
  extra: [['locality', (x) => x.locality]],
  value: (x) => x.count,
});
const build = plain<State, string>({
  name: 'test_build',
  help: 'Build.',
  type: 'gauge',
  labelNames: ['v'],
  items: (s) => [s.build],
  key: (v) => v,
  labels: (v) => `v="${v}"`,
  value: () => 1,
});

describe('metric families', () => {
  it('a per-Service family declared anywhere is under the cap; the others are not', async () => {
    const state: State = {
      endpoints: [
        { svc: web, locality: 'local', count: 2 },
        { svc: api, locality: 'remote', count: 1 },
      ],
      build: 'x',
    };
    const text = await createFamilyRegistry([build, endpoints], () => state, { maxServicePorts: 1, processMetrics: false }).metrics();
    // "shop/api" sorts first and is kept; "shop/web" is dropped and counted.
    expect(text).toContain('test_service_endpoints{namespace="shop",service="api",port="443",protocol="TCP",locality="remote"} 1\n');
    expect(text).not.toContain('service="web"');
    expect(text).toContain('test_build{v="x"} 1\n');
    expect(text).toContain('clbprobe_series_dropped_total 1\n');
  });

  it('a family name declared twice is refused', () => {
    expect(() => createFamilyRegistry([build, build], () => ({ endpoints: [], build: 'x' }), { maxServicePorts: 1, processMetrics: false })).toThrow(
      /test_build declared twice/,
    );
  });

  it("every collector's families have help, and every family name is one of clbprobe's", () => {
    const names = COLLECTORS.flatMap((c) => c.families.map((f) => f.name));
    expect(new Set(names).size).toBe(names.length);
    for (const c of COLLECTORS) for (const f of c.families) expect(f.help.length, f.name).toBeGreaterThan(10);
    for (const n of names) expect(n).toMatch(/^clbprobe_[a-z_]+$/);
  });

  it("the README's Metrics table names every family", () => {
    const readme = readFileSync(join(import.meta.dirname, '../../../README.md'), 'utf8');
    const table = readme.slice(readme.indexOf('## Metrics'), readme.indexOf('### Who may read'));
    const names = [...COLLECTORS.flatMap((c) => c.families.map((f) => f.name)), 'clbprobe_series_dropped_total'];
    expect(names.filter((n) => !table.includes(`\`${n}`))).toEqual([]);
  });
});
