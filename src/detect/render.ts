// Findings grouped by Service for a terminal (colour only on a TTY without NO_COLOR), or JSON.
import { printable } from '../printable.js';
import { fixCommand, withFixCommands } from './fixes.js';
import type { DiagnoseResult, Finding, FixChange, Severity } from './types.js';

export interface RenderOptions {
  color: boolean;
  nodeName?: string;
}

/** Colour when stdout is a TTY and NO_COLOR is unset (https://no-color.org). */
export function wantColor(stream: { isTTY?: boolean }, env: NodeJS.ProcessEnv = process.env): boolean {
  return stream.isTTY === true && (env.NO_COLOR === undefined || env.NO_COLOR === '');
}

const SGR: Record<Severity | 'bold' | 'dim', string> = { active: '1;31', risk: '33', info: '2', bold: '1', dim: '2' };

function paint(on: boolean, code: keyof typeof SGR, s: string): string {
  return on ? `\x1b[${SGR[code]}m${s}\x1b[0m` : s;
}

function wrap(text: string, width: number, indent: string): string[] {
  const out: string[] = [];
  let line = '';
  for (const word of text.split(/\s+/)) {
    if (line && line.length + 1 + word.length > width) {
      out.push(indent + line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line) out.push(indent + line);
  return out;
}

export const serviceOf = (finding: Finding): string => `${finding.service.namespace}/${finding.service.name}`;

/** Findings by Service, the Services in the order of their first finding. */
export function byService(findings: Finding[]): Map<string, Finding[]> {
  const groups = new Map<string, Finding[]>();
  for (const f of findings) groups.set(serviceOf(f), [...(groups.get(serviceOf(f)) ?? []), f]);
  return groups;
}

export const severityCount = (findings: Finding[], s: Severity): number =>
  findings.filter((f) => f.severity === s).length;

export const portLabel = (finding: Finding): string =>
  `${finding.port.protocol} ${finding.port.port}${finding.port.name ? ` (${finding.port.name})` : ''}`;

/** proxy-mode's info finding is context, with no fix to show. */
export const showsRemedy = (finding: Finding): boolean =>
  finding.severity !== 'info' || finding.mechanism !== 'proxy-mode';

function counts(findings: Finding[]): string {
  return (['active', 'risk', 'info'] as const).map((s) => `${severityCount(findings, s)} ${s}`).join(', ');
}

/** Findings are already sorted most severe first; groups keep that order by their first finding. */
export function renderText(result: DiagnoseResult, opts: RenderOptions): string {
  const c = opts.color;
  const lines: string[] = [];
  // Findings carry cluster-controlled strings (names, annotations): only the colour codes added here pass raw.
  const node = opts.nodeName ? ` — node ${printable(opts.nodeName)}` : '';
  const head = `clbprobe diagnose${node}: ${counts(result.findings)}`;
  lines.push(paint(c, 'bold', head));
  if (result.findings.length === 0) lines.push('No LoadBalancer or Ingress Service found that concerns this node.');
  for (const [name, fs] of byService(result.findings)) {
    lines.push('', paint(c, 'bold', `Service ${printable(name)}`));
    for (const f of fs) {
      const port = printable(portLabel(f));
      lines.push(`  ${paint(c, f.severity, f.severity.toUpperCase().padEnd(6))} ${f.mechanism.padEnd(12)} ${port}`);
      lines.push(...wrap(printable(f.summary), 100, '      '));
      if (f.evidence.length > 0) lines.push(paint(c, 'dim', '      evidence:'));
      for (const e of f.evidence) lines.push(`        ${printable(e)}`);
      if (showsRemedy(f)) lines.push(...wrap(`fix: ${printable(f.remedy)}`, 100, '      '));
      for (const x of f.fixes ?? [])
        lines.push(
          `      ${paint(c, 'dim', '$')} ${printable(fixCommand(x))}`,
          ...wrap(printable(`(${x.effect})`), 100, '        '),
        );
    }
  }
  if (result.warnings.length > 0) {
    lines.push('', paint(c, 'bold', 'Warnings'));
    for (const w of result.warnings) lines.push(`  - ${printable(w)}`);
  }
  return `${lines.join('\n')}\n`;
}

export function renderJson(result: DiagnoseResult, nodeName?: string): string {
  return `${JSON.stringify({ node: nodeName, ...result, findings: result.findings.map(withFixCommands) }, null, 2)}\n`;
}

/** The findings' object changes as kubectl commands, each once with who asks and its client cost; none are applied. */
export function renderFixCommands(findings: Finding[]): string {
  const byCommand = new Map<string, { fix: FixChange; why: string[] }>();
  for (const f of findings) {
    for (const fix of f.fixes ?? []) {
      const command = fixCommand(fix);
      const e = byCommand.get(command) ?? { fix, why: [] };
      const why = `${f.mechanism} ${f.severity} on ${f.port.protocol} ${f.port.port}`;
      if (!e.why.includes(why)) e.why.push(why);
      byCommand.set(command, e);
    }
  }
  if (byCommand.size === 0) return "# No finding's fix is a change to a Kubernetes object.\n";
  const lines = ['# Fixes that change a Kubernetes object. clbprobe applies none: review each, then run it.'];
  for (const [command, { fix, why }] of byCommand) {
    lines.push('', printable(`# ${fix.object.namespace}/${fix.object.name}: ${why.join('; ')}`));
    lines.push(...wrap(printable(`for clients: ${fix.effect}`), 98, '#   '));
    lines.push(printable(command));
  }
  return `${lines.join('\n')}\n`;
}
