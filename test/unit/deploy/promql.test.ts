// The alerts and the dashboard only use metrics and labels the agent exports
// (src/export/metrics.ts, read from its registry), their PromQL parses
// (promtool check rules, Debian's prometheus package), and the alerts fire on
// the series they are meant for (promtool test rules).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { createAgentRegistry } from '../../../src/agent/metrics/list.js';
import { testAgentState } from '../../support/metrics-state.js';
import { renderKustomization } from './render.js';

const PROMTOOL = '/usr/bin/promtool';
const objects = renderKustomization(join(import.meta.dirname, '../../../deploy'));

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
const groups = (
  objects.find((o) => o.kind === 'PrometheusRule') as unknown as { spec: { groups: { name: string; rules: Rule[] }[] } }
).spec.groups;
const dashboard = JSON.parse(
  (objects.find((o) => o.kind === 'ConfigMap') as unknown as { data: Record<string, string> }).data['clbprobe.json']!,
) as { panels: { title: string; targets: { expr: string }[] }[] };

/** Grafana's variables replaced by what they expand to, so promtool can parse the queries. */
const dashboardExprs = dashboard.panels.flatMap((p) =>
  p.targets.map((t) => ({
    panel: p.title,
    expr: t.expr.replaceAll('$__rate_interval', '5m').replaceAll('$namespace', '.*'),
  })),
);
const ruleExprs = groups.flatMap((g) => g.rules.map((r) => ({ panel: r.alert ?? r.record ?? '', expr: r.expr })));
/** The series the recording rules make, with the labels they keep (by (...), or the rule they sum over without (node)). */
const recorded = new Set(groups.flatMap((g) => g.rules.flatMap((r) => (r.record ? [r.record] : []))));

/** Exported metric name -> its label names, from the agent's own registry. */
const registry = createAgentRegistry(() => testAgentState(1).state, { maxServicePorts: 10, processMetrics: false });
const exported = new Map(
  registry.getMetricsAsArray().map((m) => [m.name, (m as unknown as { labelNames: string[] }).labelNames] as const),
);
/** Labels Prometheus adds itself (scrape target, PodMonitor relabeling). */
const TARGET_LABELS = ['instance', 'job', 'node'];

describe('alerts and dashboard vs the agent metrics', () => {
  const dir = mkdtempSync(join(tmpdir(), 'cbs-promql-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it.each([...ruleExprs, ...dashboardExprs].map((e) => [e.panel, e] as const))(
    '%s uses exported metrics and labels',
    (_, { expr }) => {
      const names = expr.match(/[a-z0-9_:]*\bclbprobe_[a-z0-9_:]+/g) ?? [];
      expect(names.length).toBeGreaterThan(0);
      for (const name of names) {
        if (name.includes(':')) {
          expect(recorded.has(name), `${name} is not recorded by a rule of deploy/prometheusrule.yaml`).toBe(true);
          continue;
        }
        expect(exported.has(name), `${name} is not exported by src/agent/metrics`).toBe(true);
        const allowed = [...exported.get(name)!, ...TARGET_LABELS];
        // Label matchers right after the metric name, and the labels of by (...) / on(...) / group_left(...).
        const matchers = new RegExp(`${name}\\{([^}]*)\\}`).exec(expr)?.[1] ?? '';
        for (const m of matchers.matchAll(/([a-z_]+)\s*(?:=~|!=|!~|=)/g))
          expect(allowed, `${name}{${m[1]}}`).toContain(m[1]);
      }
      const allLabels = new Set([...exported.values()].flat().concat(TARGET_LABELS));
      for (const g of expr.matchAll(/\b(?:by|on|group_left)\s*\(([^)]*)\)/g)) {
        for (const l of g[1]!
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean))
          expect([...allLabels], l).toContain(l);
      }
    },
  );

  it.skipIf(!existsSync(PROMTOOL))('promtool parses the alert rules and the dashboard queries', () => {
    const rules = join(dir, 'rules.yaml');
    const panels = dashboardExprs.map((e, i) => ({ record: `clbprobe:dashboard_panel_${i}`, expr: e.expr }));
    writeFileSync(rules, stringify({ groups: [...groups, { name: 'dashboard', rules: panels }] }));
    const r = spawnSync(PROMTOOL, ['check', 'rules', rules], { encoding: 'utf8' });
    expect(r.stderr + r.stdout).toMatch(new RegExp(`SUCCESS: ${ruleExprs.length + panels.length} rules found`));
    expect(r.status).toBe(0);
  });

  it.skipIf(!existsSync(PROMTOOL))(
    'the alerts fire for a looping Service, dropped health checks and a failing source; the rules count loops per Service',
    () => {
      // Annotations are checked by `check rules`; here only what fires, when, with which labels.
      const bare = groups.map((g) => ({ name: g.name, rules: g.rules.map(({ annotations: _, ...r }) => r) }));
      writeFileSync(join(dir, 'bare.yaml'), stringify({ groups: bare }));
      const svc = 'namespace="lab",service="web",port="80",protocol="TCP",node="node1"';
      const labels = { namespace: 'lab', service: 'web', port: '80', protocol: 'TCP', node: 'node1' };
      const svcOf = 'namespace="lab",service="web",port="80",protocol="TCP"';
      const test = {
        rule_files: ['bare.yaml'],
        evaluation_interval: '1m',
        tests: [
          {
            interval: '1m',
            input_series: [
              { series: `clbprobe_findings_active{${svc},mechanism="L4-loop",severity="active"}`, values: '1x20' },
              { series: `clbprobe_findings_active{${svc},mechanism="port-refused",severity="risk"}`, values: '1x20' },
              { series: `clbprobe_lb_path_packets_total{${svc},kind="loop_return"}`, values: '0+60x20' },
              { series: `clbprobe_lb_path_packets_total{${svc},kind="to_lb"}`, values: '0+600x20' },
              { series: `clbprobe_lb_path_packets_total{${svc},kind="hc_local_src"}`, values: '0+0x20' },
              { series: 'clbprobe_source_up{source="ipvs",node="node1"}', values: '0x20' },
              { series: 'clbprobe_source_up{source="conntrack",node="node1"}', values: '1x20' },
            ],
            alert_rule_test: [
              { eval_time: '1m', alertname: 'ClbprobeLoopbackActive', exp_alerts: [] },
              {
                eval_time: '3m',
                alertname: 'ClbprobeLoopbackActive',
                exp_alerts: [{ exp_labels: { ...labels, mechanism: 'L4-loop', severity: 'warning' } }],
              },
              {
                eval_time: '10m',
                alertname: 'ClbprobeLoopbackPackets',
                exp_alerts: [{ exp_labels: { ...labels, severity: 'warning' } }],
              },
              { eval_time: '10m', alertname: 'ClbprobeHealthChecksDropped', exp_alerts: [] },
              { eval_time: '5m', alertname: 'ClbprobeSourceDown', exp_alerts: [] },
              {
                eval_time: '11m',
                alertname: 'ClbprobeSourceDown',
                exp_alerts: [{ exp_labels: { source: 'ipvs', node: 'node1', severity: 'info' } }],
              },
            ],
          },
          {
            interval: '1m',
            input_series: [{ series: `clbprobe_lb_path_packets_total{${svc},kind="hc_local_src"}`, values: '0+30x20' }],
            alert_rule_test: [
              {
                eval_time: '10m',
                alertname: 'ClbprobeHealthChecksDropped',
                exp_alerts: [{ exp_labels: { ...labels, severity: 'warning' } }],
              },
              { eval_time: '10m', alertname: 'ClbprobeLoopbackPackets', exp_alerts: [] },
            ],
          },
          {
            // Two nodes loop through the LB of lab/web, a third only calls it: the cluster's answers per Service port.
            interval: '1m',
            input_series: [
              { series: `clbprobe_findings_active{${svc},mechanism="L4-loop",severity="active"}`, values: '1x20' },
              {
                series: `clbprobe_findings_active{${svc.replace('node1', 'node2')},mechanism="L4-loop",severity="active"}`,
                values: '1x20',
              },
              {
                series: `clbprobe_findings_active{${svc.replace('node1', 'node2')},mechanism="no-SNAT",severity="active"}`,
                values: '1x20',
              },
              { series: `clbprobe_lb_path_packets_total{${svc},kind="loop_return"}`, values: '0+60x20' },
              {
                series: `clbprobe_lb_path_packets_total{${svc.replace('node1', 'node2')},kind="loop_return"}`,
                values: '0+120x20',
              },
              {
                series: `clbprobe_lb_path_packets_total{${svc.replace('node1', 'node3')},kind="to_lb"}`,
                values: '0+60x20',
              },
            ],
            promql_expr_test: [
              {
                expr: 'service:clbprobe_loop_nodes:count',
                eval_time: '10m',
                exp_samples: [{ labels: `service:clbprobe_loop_nodes:count{${svcOf}}`, value: 2 }],
              },
              {
                expr: 'service:clbprobe_loops_active:count',
                eval_time: '10m',
                exp_samples: [{ labels: `service:clbprobe_loops_active:count{${svcOf}}`, value: 3 }],
              },
              {
                expr: 'service_kind:clbprobe_lb_path_packets:rate5m',
                eval_time: '10m',
                exp_samples: [
                  { labels: `service_kind:clbprobe_lb_path_packets:rate5m{${svcOf},kind="loop_return"}`, value: 3 },
                  { labels: `service_kind:clbprobe_lb_path_packets:rate5m{${svcOf},kind="to_lb"}`, value: 1 },
                ],
              },
            ],
          },
        ],
      };
      writeFileSync(join(dir, 'test.yaml'), stringify(test));
      const r = spawnSync(PROMTOOL, ['test', 'rules', 'test.yaml'], { encoding: 'utf8', cwd: dir });
      expect(r.stdout + r.stderr).toContain('SUCCESS');
      expect(r.status).toBe(0);
    },
  );

  it('the dashboard has the per-Service loopback rate, the findings table and the per-node breakdown', () => {
    const titles = dashboard.panels.map((p) => p.title);
    expect(titles).toEqual(
      expect.arrayContaining(['Loopback packets/s per Service', 'Findings', 'Loopback packets/s per node']),
    );
    expect(readFileSync(join(import.meta.dirname, '../../../deploy/grafana-dashboard.json'), 'utf8')).toContain(
      '"uid": "clbprobe"',
    );
  });
});
