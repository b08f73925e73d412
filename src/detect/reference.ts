// The README's Findings reference from the DETECTORS list (`npm run readme:findings`; a unit test checks it).
import { DETECTORS } from './list.js';

const FINDINGS_BEGIN = '<!-- findings-reference: generated from src/detect/list.ts by `npm run readme:findings` -->';
const FINDINGS_END = '<!-- /findings-reference -->';

const cell = (s: string): string => s.replace(/\|/g, '\\|').replace(/\s*\n\s*/g, ' ');

export function findingsTable(): string {
  const rows = DETECTORS.map((d) => `| \`${d.mechanism}\` | ${cell(d.readme.what)} | ${cell(d.readme.fix)} |`);
  return [
    '| mechanism | what happens | fix (the finding says which mitigation it already sees) |',
    '|---|---|---|',
    ...rows,
  ].join('\n');
}

/** The README text with the table between the markers replaced; throws when a marker is missing. */
export function withFindingsTable(readme: string): string {
  const a = readme.indexOf(FINDINGS_BEGIN);
  const b = readme.indexOf(FINDINGS_END);
  if (a < 0 || b < a) throw new Error(`README: the markers ${FINDINGS_BEGIN} ... ${FINDINGS_END} are missing`);
  return `${readme.slice(0, a + FINDINGS_BEGIN.length)}\n\n${findingsTable()}\n\n${readme.slice(b)}`;
}
