// Writes the README's Findings reference from the DETECTORS list (src/detect/reference.ts).
import { readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { withFindingsTable } from '../src/detect/reference.js';

const file = resolve(import.meta.dirname, '../README.md');
const before = readFileSync(file, 'utf8');
const after = withFindingsTable(before);
if (after !== before) writeFileSync(file, after);
process.stdout.write(
  after === before ? 'README.md: Findings reference already up to date\n' : 'README.md: Findings reference rewritten\n',
);
