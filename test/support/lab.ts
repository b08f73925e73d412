// The namespace loop lab lives in src/demo/lab.ts (`clbprobe demo` builds it
// too); tests build it with their own namespace prefix, cbd-.
import { createLoopLab as createLab, type Etp, type LoopLab } from '../../src/demo/lab.js';

export { type Etp, LAB, type LoopLab } from '../../src/demo/lab.js';

export function createLoopLab(etp: Etp): Promise<LoopLab> {
  return createLab(etp, 'cbd-');
}
