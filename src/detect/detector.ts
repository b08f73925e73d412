// What one detector file exports: its mechanism and all said about it, listed in list.ts, which everything reads.

import type { ServiceView } from '../cluster/types.js';
import type { DetectContext } from './context.js';
import type { FindingOf, FixChange } from './core-types.js';
import type { Observations, ObsKind } from './correlator.js';

/** A mitigation a detector may credit (remedies.ts says how each is seen). */
export type Credit = 'ipModeProxy' | 'lbRewritesSource' | 'preventLoopback' | 'alibabaHostname' | 'masquerade';

export interface DetectorDef<M extends string = string> {
  /** The finding's `mechanism` (the metric label, the CLI column). */
  mechanism: M;
  /** The fix (docs/domain.md), followed by remedy() with mitigations in place; context findings may write their own. */
  fix: string;
  /** The mitigations that count against this mechanism when in place (remedies.ts); none when absent. */
  credits?: readonly Credit[];
  /** The correlator's observation kinds this detector turns into findings (none: configuration only). */
  observes: readonly ObsKind[];
  /** Its findings are always info, context for the others: not run when only significant findings are wanted. */
  contextOnly?: true;
  /** Its row of the README's Findings reference: what happens, and the fix in short. */
  readme: { what: string; fix: string };
  /** The fix's Service changes (fixes.ts); absent when the fix is outside Kubernetes objects. */
  changes?(s: ServiceView, ctx: DetectContext): FixChange[];
  detect(ctx: DetectContext, obs: Observations): FindingOf<M>[];
}
