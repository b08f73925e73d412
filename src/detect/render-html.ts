// `clbprobe diagnose --html FILE`: one self-contained page per node (no script or external resource, for tickets),
// drawing each loop as the vendors do: pod → LB VIP → node:NodePort → server pod, with every leg's conntrack entry.
import { fixCommand } from './fixes.js';
import { byService, portLabel, severityCount, showsRemedy } from './render.js';
import type { DiagnoseResult, Finding, LoopPath, Severity } from './types.js';

export interface HtmlReportOptions {
  nodeName: string;
  /** When the diagnosis ran (ISO 8601). */
  generatedAt: string;
  /** Where the inputs came from, e.g. "live" or "bundle ./node-a". */
  source: string;
}

const ESC: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const escapeHtml = (s: string): string => s.replace(/[&<>"']/g, (c) => ESC[c]!);

const SEVERITY_COLOR: Record<Severity, string> = { active: '#c62828', risk: '#ef6c00', info: '#607d8b' };

const CSS = [
  '',
  'body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;' +
    'margin:24px;color:#1a1a1a;max-width:1200px}',
  'h1{font-size:22px;margin:0 0 4px}',
  '.meta{color:#555;margin-bottom:16px}',
  '.counts span{display:inline-block;margin-right:12px;font-weight:600}',
  'section.svc{border-top:2px solid #ddd;margin-top:20px;padding-top:8px}',
  'h2{font-size:18px;margin:8px 0}',
  '.finding{border:1px solid #ddd;border-left:6px solid var(--sev);' +
    'border-radius:4px;padding:10px 14px;margin:12px 0;background:#fff}',
  '.head{font-weight:600}',
  '.badge{display:inline-block;color:#fff;background:var(--sev);border-radius:3px;' +
    'padding:1px 7px;margin-right:8px;font-size:12px;letter-spacing:.04em}',
  '.summary{margin:6px 0}',
  'pre{background:#f6f8fa;border:1px solid #e1e4e8;border-radius:3px;padding:8px;' +
    'overflow-x:auto;font-size:12px;margin:4px 0;white-space:pre-wrap;word-break:break-all}',
  '.fix{background:#e8f5e9;border:1px solid #a5d6a7;border-radius:3px;padding:8px;margin-top:8px}',
  '.fix b{color:#1b5e20}',
  'table.legs{border-collapse:collapse;margin:6px 0;width:100%}',
  'table.legs td,table.legs th{border:1px solid #e1e4e8;' +
    'padding:4px 6px;text-align:left;vertical-align:top;font-size:12px}',
  'table.legs td.ct{font-family:ui-monospace,monospace;word-break:break-all}',
  'svg.path{display:block;margin:8px 0;max-width:100%;height:auto}',
  '.warn{color:#8a6d00}',
  '',
].join('\n');

const BOX_W = 200;
const BOX_H = 56;
const GAP = 90;

/** The drawn path of one loop: boxes left to right, numbered legs above, the reply below. */
function loopSvg(path: LoopPath): string {
  const n = path.hops.length;
  const width = n * BOX_W + (n - 1) * GAP + 20;
  const top = 40;
  const height = top + BOX_H + 90;
  const x = (i: number) => 10 + i * (BOX_W + GAP);
  const parts = [
    `<svg class="path" role="img" aria-label="loop path" xmlns="http://www.w3.org/2000/svg" ` +
      `width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`,
    '<defs><marker id="a" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" ' +
      'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#333"/></marker>' +
      '<marker id="r" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" ' +
      'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#c62828"/></marker></defs>',
    ...path.hops.flatMap((h, i) => [
      `<rect x="${x(i)}" y="${top}" width="${BOX_W}" height="${BOX_H}" rx="6" fill="#e3f2fd" stroke="#1565c0"/>`,
      `<text x="${x(i) + BOX_W / 2}" y="${top + 22}" text-anchor="middle" ` +
        `font-size="13" font-weight="600" fill="#0d47a1">${escapeHtml(h.role)}</text>`,
      `<text x="${x(i) + BOX_W / 2}" y="${top + 42}" text-anchor="middle" ` +
        `font-size="12" font-family="monospace">${escapeHtml(h.address)}</text>`,
    ]),
  ];
  const stepLabels = ['1 connect', '2 LB sends it back to this node', '3 DNAT to the server'];
  for (let i = 0; i + 1 < n; i++) {
    const y = top + BOX_H / 2;
    parts.push(
      `<line x1="${x(i) + BOX_W}" y1="${y}" x2="${x(i + 1) - 2}" ` +
        `y2="${y}" stroke="#333" stroke-width="2" marker-end="url(#a)"/>`,
      `<text x="${x(i) + BOX_W + GAP / 2}" y="${top - 10}" text-anchor="middle" ` +
        `font-size="11">${escapeHtml(stepLabels[i] ?? '')}</text>`,
    );
  }
  // The reply: from the last box back to the first, under them, skipping the LB.
  const y0 = top + BOX_H;
  const xs = x(n - 1) + BOX_W / 2;
  const xc = x(0) + BOX_W / 2;
  parts.push(
    `<path d="M${xs},${y0} C${xs},${y0 + 60} ${xc},${y0 + 60} ${xc},${y0 + 4}" fill="none" ` +
      `stroke="#c62828" stroke-width="2" stroke-dasharray="6 4" marker-end="url(#r)"/>`,
    `<text x="${(xs + xc) / 2}" y="${y0 + 62}" text-anchor="middle" font-size="12" ` +
      `fill="#c62828" font-weight="600">reply ${escapeHtml(path.reply.from)} ` +
      `→ ${escapeHtml(path.reply.to)}: skips the LB</text>`,
    '</svg>',
  );
  return parts.join('');
}

function legsTable(path: LoopPath): string {
  const rows = path.legs
    .map(
      (l) =>
        `<tr><td>${escapeHtml(l.label)}</td><td>${escapeHtml(l.from)} → ` +
        `${escapeHtml(l.to)}</td><td class="ct">${escapeHtml(l.conntrack)}</td></tr>`,
    )
    .join('');
  return (
    `<table class="legs"><tr><th>leg</th><th>tuple</th><th>conntrack entry on this node</th></tr>${rows}` +
    `<tr><td>reply</td><td>${escapeHtml(path.reply.from)} → ` +
    `${escapeHtml(path.reply.to)}</td><td>${escapeHtml(path.reply.note)}</td></tr></table>`
  );
}

/** One finding's block: its summary, drawn loop, evidence, fix and fix commands. */
export function findingHtml(finding: Finding): string {
  const out = [
    `<div class="finding ${finding.severity}" style="--sev:${SEVERITY_COLOR[finding.severity]}">`,
    `<div class="head"><span class="badge">${finding.severity.toUpperCase()}` +
      `</span>${escapeHtml(finding.mechanism)} · ${escapeHtml(portLabel(finding))}</div>`,
    `<p class="summary">${escapeHtml(finding.summary)}</p>`,
  ];
  if (finding.path) out.push(loopSvg(finding.path), legsTable(finding.path));
  if (finding.evidence.length > 0)
    out.push('<div>evidence:</div>', `<pre>${finding.evidence.map(escapeHtml).join('\n')}</pre>`);
  if (showsRemedy(finding)) out.push(`<div class="fix"><b>fix:</b> ${escapeHtml(finding.remedy)}</div>`);
  for (const x of finding.fixes ?? [])
    out.push(
      `<div class="fix"><code>${escapeHtml(fixCommand(x))}</code><br>for clients: ${escapeHtml(x.effect)}</div>`,
    );
  out.push('</div>');
  return out.join('');
}

/** The whole page. Findings are already sorted most severe first; Services keep that order. */
export function renderHtml(result: DiagnoseResult, options: HtmlReportOptions): string {
  const count = (severity: Severity): string =>
    `<span style="color:${SEVERITY_COLOR[severity]}">${severityCount(result.findings, severity)} ${severity}</span>`;
  const body: string[] = [
    `<h1>clbprobe diagnose — node ${escapeHtml(options.nodeName)}</h1>`,
    `<div class="meta">${escapeHtml(options.generatedAt)} · ${escapeHtml(options.source)}</div>`,
    `<div class="counts">${count('active')}${count('risk')}${count('info')}</div>`,
  ];
  if (result.findings.length === 0)
    body.push('<p>No LoadBalancer or Ingress Service found that concerns this node.</p>');
  for (const [name, fs] of byService(result.findings))
    body.push(`<section class="svc"><h2>Service ${escapeHtml(name)}</h2>${fs.map(findingHtml).join('')}</section>`);
  if (result.warnings.length > 0) {
    body.push(
      `<section class="svc"><h2>Warnings</h2><ul>` +
        `${result.warnings.map((w) => `<li class="warn">${escapeHtml(w)}</li>`).join('')}</ul></section>`,
    );
  }
  return htmlPage(`clbprobe diagnose — ${options.nodeName}`, body);
}

/** A self-contained page with the report's style; `body` is HTML already escaped. */
export function htmlPage(title: string, body: string[]): string {
  return (
    '<!doctype html><html lang="en"><head><meta charset="utf-8">' +
    `<title>${escapeHtml(title)}</title><style>${CSS}</style></head>` +
    `<body>${body.join('\n')}</body></html>\n`
  );
}
