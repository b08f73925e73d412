// What a diagnosis reports: findings of the DETECTORS mechanisms (list.ts); input types are in core-types.ts.
import type { FindingOf } from './core-types.js';
import type { Mechanism } from './list.js';

export type * from './core-types.js';
export type { Mechanism } from './list.js';

export type Finding = FindingOf<Mechanism>;

export interface DiagnoseResult {
  findings: Finding[];
  warnings: string[];
}
