// What one detector file exports: its mechanism and everything said about it. The DETECTORS list
// (list.ts) holds them, and everything that names mechanisms reads it from there.

import type { ServiceView } from '../cluster/types.js';
import type { DetectContext } from './context-types.js';
import type { FindingOf, FixChange } from './core-types.js';
import type { Observations, ObsKind } from './correlator.js';

/** A mitigation a detector may credit (remedies.ts says how each is seen). */
export type Credit = 'ipModeProxy' | 'lbRewritesSource' | 'preventLoopback' | 'alibabaHostname' | 'masquerade';

export interface DetectorDef<M extends string = string> {
  /** The finding's `mechanism` (the metric label, the CLI column). */
  mechanism: M;
  /**
   * The fix the finding names (docs/domain.md); remedy() follows it with the mitigations already in
   * place. Context findings may write their own remedy per finding instead.
   */
  fix: string;
  /** The mitigations that count against this mechanism when in place (remedies.ts). */
  credits: readonly Credit[];
  /** The correlator's observation kinds this detector turns into findings (none: configuration only). */
  observes: readonly ObsKind[];
  /** Its row of the README's Findings reference: what happens, and the fix in short. */
  readme: { what: string; fix: string };
  /**
   * The parts of the fix that are a change to the Service (fixes.ts), for its active and risk
   * findings; absent when the fix is outside Kubernetes objects (kube-proxy, the LB, the clients).
   */
  changes?(s: ServiceView, ctx: DetectContext): FixChange[];
  detect(ctx: DetectContext, obs: Observations): FindingOf<M>[];
}
