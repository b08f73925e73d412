// Every detector, in listing order for equal severity: loops, preconditions, context; Mechanism, MECHANISM_RANK,
// OBSERVED_KINDS and the README reference derive from it (test/unit/detect/list.test.ts catches unlisted files).
import type { ObsKind } from './correlator.js';
import { directPod } from './direct-pod.js';
import { drift } from './drift.js';
import { guestLocalRoute } from './guest-local-route.js';
import { hcDrop } from './hc-drop.js';
import { l4Loop } from './l4-loop.js';
import { l7Loop } from './l7-loop.js';
import { localNoEp } from './local-no-ep.js';
import { noSnat } from './no-snat.js';
import { nodeNameMismatch } from './node-name-mismatch.js';
import { portRefused } from './port-refused.js';
import { proxyMode } from './proxy-mode.js';
import { sourceRanges } from './source-ranges.js';

export const DETECTORS = [
  l4Loop,
  l7Loop,
  directPod,
  localNoEp,
  sourceRanges,
  nodeNameMismatch,
  portRefused,
  hcDrop,
  noSnat,
  drift,
  guestLocalRoute,
  proxyMode,
] as const;

export type Mechanism = (typeof DETECTORS)[number]['mechanism'];

/** A finding's place in the list: the sort order within one severity. */
export const MECHANISM_RANK = Object.fromEntries(DETECTORS.map((d, i) => [d.mechanism, i])) as Record<
  Mechanism,
  number
>;

/** The observation kinds some detector reads: the correlator records no other (nothing would report them). */
export const OBSERVED_KINDS: ReadonlySet<ObsKind> = new Set(DETECTORS.flatMap((d) => d.observes));
