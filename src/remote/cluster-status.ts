// `clbprobe status`: the relay's /status as one cluster view per Service and mechanism, with unanswered nodes and why;
// filters, and text, JSON or HTML output.

import { arrOf, isObj, isStr } from '../cluster/fields.js';
import { byText } from '../compare.js';
import { withCommand } from '../detect/fixes.js';
import { compareFindings, SEVERITY_RANK } from '../detect/index.js';
import { serviceOf } from '../detect/render.js';
import { escapeHtml, findingHtml, htmlPage } from '../detect/render-html.js';
import type { Finding, FixChange, FixCommand, Severity } from '../detect/types.js';
import { printable } from '../printable.js';
import { jsonObject } from './evidence-lines.js';
import type { StatusNodeLine } from './status.js';

/** A finding as one node reported it, each fix with its command. */
export type NodeFinding = Omit<Finding, 'fixes'> & { node: string; fixes?: FixCommand[] };

export interface ClusterStatus {
  findings: NodeFinding[];
  nodes: StatusNodeLine[];
  /** Relay lines that did not parse as expected, with why. */
  malformed: string[];
}

interface StatusRow {
  service: string;
  mechanism: string;
  severity: Severity;
  ports: string[];
  /** Nodes where the mechanism is active, and at risk (not active there). */
  active: string[];
  risk: string[];
  fixes: FixCommand[];
}

/** Reads one relay line into the status; a line of an unexpected shape is kept as malformed. */
export function addStatusLine(st: ClusterStatus, text: string): void {
  if (!text.trim()) return;
  const o = jsonObject(text);
  if (typeof o === 'string') return void st.malformed.push(`${o}: ${text.slice(0, 120)}`);
  if (o.type === 'node' && typeof o.node === 'string' && (o.status === 'ok' || o.status === 'failed'))
    st.nodes.push(o as unknown as StatusNodeLine);
  else if (o.type === 'finding' && isFinding(o)) {
    const { type: _type, pod: _pod, fixes, ...f } = o;
    const checked = Array.isArray(fixes) ? fixes.map(fixOf).filter((x): x is FixCommand => x !== undefined) : [];
    st.findings.push({ ...(f as unknown as NodeFinding), ...(checked.length ? { fixes: checked } : {}) });
  } else if (o.type !== 'summary') st.malformed.push(`unexpected line: ${text.slice(0, 120)}`);
}

function isFinding(line: Record<string, unknown>): boolean {
  const svc = isObj(line.service) ? line.service : {};
  const port = isObj(line.port) ? line.port : {};
  return (
    [line.node, svc.namespace, svc.name, port.protocol, line.mechanism, line.summary, line.remedy].every(isStr) &&
    typeof port.port === 'number' &&
    isStr(line.severity) &&
    Object.hasOwn(SEVERITY_RANK, line.severity) &&
    arrOf(line.evidence, isStr)
  );
}

/** A fix as data with the command built here, since a person runs it and an agent's text is never trusted. */
function fixOf(value: unknown): FixCommand | undefined {
  const x = isObj(value) ? value : {};
  const obj = isObj(x.object) ? x.object : {};
  const patch = isObj(x.patch) ? x.patch : {};
  const name = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
  const valid =
    obj.kind === 'Service' &&
    obj.apiVersion === 'v1' &&
    name.test(String(obj.namespace)) &&
    name.test(String(obj.name)) &&
    (patch.type === 'merge' || patch.type === 'json') &&
    typeof patch.body === 'object' &&
    patch.body !== null &&
    isStr(x.kind) &&
    isStr(x.effect);
  if (!valid) return undefined;
  const object = { apiVersion: 'v1', kind: 'Service', namespace: String(obj.namespace), name: String(obj.name) };
  return withCommand({ kind: x.kind, object, patch, effect: String(x.effect).slice(0, 1000) } as FixChange);
}

/** The findings of `service` (NAMESPACE/NAME, or NAME in any namespace), `namespace`, `node`, `severity` or worse. */
export function filterStatus(
  status: ClusterStatus,
  filters: { service?: string; namespace?: string; node?: string; severity?: Severity },
): ClusterStatus {
  const keep = (finding: NodeFinding): boolean =>
    (filters.service === undefined ||
      (filters.service.includes('/')
        ? serviceOf(finding) === filters.service
        : finding.service.name === filters.service)) &&
    (filters.namespace === undefined || finding.service.namespace === filters.namespace) &&
    (filters.node === undefined || finding.node === filters.node) &&
    (filters.severity === undefined || SEVERITY_RANK[finding.severity] <= SEVERITY_RANK[filters.severity]);
  return {
    findings: status.findings.filter(keep).sort((a, b) => compareFindings(a, b) || byText(a.node, b.node)),
    nodes: status.nodes
      .filter((n) => filters.node === undefined || n.node === filters.node)
      .sort((a, b) => byText(a.node, b.node)),
    malformed: status.malformed,
  };
}

/** One row per Service and mechanism, most severe first. */
function statusRows(findings: NodeFinding[]): StatusRow[] {
  const rows = new Map<string, StatusRow>();
  for (const f of findings) {
    const key = `${serviceOf(f)} ${f.mechanism}`;
    const r = rows.get(key) ?? {
      service: serviceOf(f),
      mechanism: f.mechanism,
      severity: f.severity,
      ports: [],
      active: [],
      risk: [],
      fixes: [],
    };
    if (SEVERITY_RANK[f.severity] < SEVERITY_RANK[r.severity]) r.severity = f.severity;
    const port = `${f.port.protocol} ${f.port.port}`;
    if (!r.ports.includes(port)) r.ports.push(port);
    const list = f.severity === 'active' ? r.active : f.severity === 'risk' ? r.risk : undefined;
    if (list && !list.includes(f.node)) list.push(f.node);
    for (const x of f.fixes ?? []) if (!r.fixes.some((y) => y.command === x.command)) r.fixes.push(x);
    rows.set(key, r);
  }
  for (const r of rows.values()) r.risk = r.risk.filter((n) => !r.active.includes(n));
  const byNodes = (row: StatusRow): number => row.active.length + row.risk.length;
  return [...rows.values()].sort(
    (a, b) =>
      SEVERITY_RANK[a.severity] - SEVERITY_RANK[b.severity] ||
      byNodes(b) - byNodes(a) ||
      byText(a.service, b.service) ||
      byText(a.mechanism, b.mechanism),
  );
}

function nodeList(nodes: string[], max: number): string {
  if (nodes.length === 0) return '-';
  const shown = nodes.slice().sort(byText).slice(0, max).join(',');
  return `${nodes.length} (${shown}${nodes.length > max ? `,+${nodes.length - max}` : ''})`;
}

/** A row's cells: ports joined by `sep`, at most `max` nodes named. */
function rowCells(row: StatusRow, sep: string, max: number): string[] {
  return [
    row.service,
    row.mechanism,
    row.severity,
    row.ports.join(sep),
    nodeList(row.active, max),
    nodeList(row.risk, max),
  ];
}

function table(head: string[], rows: string[][]): string[] {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const fmt = (r: string[]) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(w[i]!))).join('  ');
  return [fmt(head), ...rows.map(fmt)];
}

/** The nodes that did not answer, and what the answering ones could not show. */
function nodeNotes(nodes: StatusNodeLine[]): string[] {
  const out: string[] = [];
  for (const n of nodes) {
    if (n.status === 'failed') out.push(`${n.node}${n.pod ? ` (${n.pod})` : ''}: no answer: ${n.error ?? 'unknown'}`);
    else {
      if (n.more)
        out.push(`${n.node}: ${n.more} more findings than the agent sends (run clbprobe diagnose on the node)`);
      if (n.unchecked)
        out.push(
          `${n.node}: access to ${n.unchecked} Service(s) could not be ` +
            `checked, their findings are not shown: ${n.uncheckedReason ?? ''}`,
        );
    }
  }
  return out.map((l) => printable(l));
}

function answered(nodes: StatusNodeLine[]): { ok: number; failed: number } {
  const ok = nodes.filter((n) => n.status === 'ok').length;
  return { ok, failed: nodes.length - ok };
}

/** Whether "nothing active" is known: some agent answered, every one in full, and every relay line parsed. */
export function answeredInFull(st: ClusterStatus): boolean {
  return st.nodes.length > 0 && st.nodes.every((n) => n.status === 'ok' && !n.unchecked) && st.malformed.length === 0;
}

export function renderStatusText(st: ClusterStatus): string {
  const rows = statusRows(st.findings);
  const { ok, failed } = answered(st.nodes);
  const active = new Set(rows.filter((r) => r.severity === 'active').map((r) => r.service)).size;
  const lines = [
    `clbprobe status: ${ok} node(s) answered, ${failed} did not; ` +
      `${new Set(rows.map((r) => r.service)).size} Service(s) with findings, ${active} with an active loop`,
    '',
  ];
  if (rows.length === 0)
    lines.push(
      ok > 0
        ? 'No active or at-risk finding on the nodes that answered, for the Services you may get.'
        : 'No node answered: nothing is known.',
    );
  else {
    const cells = rows.map((r) => rowCells(r, ',', 3).map((c) => printable(c)));
    lines.push(...table(['SERVICE', 'MECHANISM', 'SEVERITY', 'PORTS', 'ACTIVE ON', 'AT RISK ON'], cells));
  }
  const notes = nodeNotes(st.nodes);
  if (notes.length > 0) lines.push('', 'Nodes not answering, or answering in part:', ...notes.map((n) => `  ${n}`));
  if (st.malformed.length > 0)
    lines.push(
      '',
      `The relay sent ${st.malformed.length} line(s) not understood; the first: ${printable(st.malformed[0]!)}`,
    );
  return `${lines.join('\n')}\n`;
}

export function renderStatusJson(st: ClusterStatus): string {
  const nodes = st.nodes.map(({ type: _t, ...n }) => n);
  const json = { nodes, services: statusRows(st.findings), findings: st.findings, malformed: st.malformed };
  return `${JSON.stringify(json, null, 2)}\n`;
}

/** One page for the cluster: the table, then per Service each node's findings as the node pages show them. */
export function renderStatusHtml(st: ClusterStatus, generatedAt: string): string {
  const rows = statusRows(st.findings);
  const { ok, failed } = answered(st.nodes);
  const body = [
    '<h1>clbprobe status — cluster</h1>',
    `<div class="meta">${escapeHtml(generatedAt)} · ${ok} node(s) answered, ${failed} did not</div>`,
    '<table class="legs"><tr><th>Service</th><th>mechanism</th><th>severity</th><th>ports</th>' +
      '<th>active on</th><th>at risk on</th></tr>' +
      rows.map((r) => `<tr><td>${rowCells(r, ', ', 20).map(escapeHtml).join('</td><td>')}</td></tr>`).join('') +
      '</table>',
  ];
  const notes = nodeNotes(st.nodes);
  if (notes.length > 0)
    body.push(
      `<section class="svc"><h2>Nodes not answering, or answering in part</h2><ul>` +
        `${notes.map((n) => `<li class="warn">${escapeHtml(n)}</li>`).join('')}</ul></section>`,
    );
  for (const svc of new Set(rows.map((r) => r.service))) {
    const fs = st.findings.filter((f) => serviceOf(f) === svc);
    const section = [`<section class="svc"><h2>Service ${escapeHtml(svc)}</h2>`];
    for (const n of [...new Set(fs.map((f) => f.node))].sort(byText))
      section.push(`<h3>node ${escapeHtml(n)}</h3>`, ...fs.filter((f) => f.node === n).map(findingHtml));
    body.push(`${section.join('')}</section>`);
  }
  return htmlPage('clbprobe status — cluster', body);
}
