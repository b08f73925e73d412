// GET /findings: this node's findings as NDJSON for `clbprobe status`, guarded as /evidence and left out for Services
// the user may not "get"; the relay as itself gets active findings where it may create Events.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AccessAttributes } from '../cluster/access-review.js';
import { withFixCommands } from '../detect/fixes.js';
import type { Finding } from '../detect/types.js';
import { errText } from '../errors.js';
import {
  admit,
  CallerSlots,
  DEFAULT_CALLER_LIMITS,
  type EvidenceAccess,
  refuse,
  requestUser,
} from './evidence-http.js';

export interface FindingsState {
  /** False until the first sync: the findings are not known yet (not "none"). */
  ready: boolean;
  nodeName: string;
  version: string;
  findings: readonly Finding[];
}

const DEFAULT_FINDINGS_LIMITS = {
  /** Findings per answer; the end line counts the rest. */
  maxFindings: 2000,
  /** Evidence lines kept per finding (the node's own `diagnose` has them all). */
  maxEvidenceLines: 8,
  /** Distinct Services whose access is checked per answer; findings of the others are reported unchecked. */
  maxServices: 1000,
  /** Access reviews in flight at once for one answer. */
  reviewConcurrency: 4,
};

const line = (o: object): string => `${JSON.stringify(o)}\n`;

/** A finding's evidence cut to `max` lines, the last saying how many more there are. */
function cutEvidence(evidence: readonly string[], max: number): readonly string[] {
  if (evidence.length <= max) return evidence;
  return [...evidence.slice(0, max), `(${evidence.length - max} more lines: clbprobe diagnose on the node)`];
}

export function findingsRoute(
  access: EvidenceAccess,
  state: () => FindingsState,
  limits = DEFAULT_FINDINGS_LIMITS,
  callerLimits = DEFAULT_CALLER_LIMITS,
): (req: IncomingMessage, res: ServerResponse) => void {
  const slots = new CallerSlots(callerLimits);
  return (req, res) => {
    const source = req.socket.remoteAddress ?? '';
    void (async () => {
      const who = await requestUser(access, req, true);
      // The relay as itself records Events: it sees the active findings where it may create them.
      const recorder = who.ok && who.user.username === access.relayUser;
      if (!admit(res, who, slots, false)) return;
      const st = state();
      if (!st.ready)
        return refuse(
          res,
          503,
          `the agent on ${st.nodeName} has not finished its first sync: its findings are not known yet`,
          5,
        );
      const findings = recorder ? st.findings.filter((f) => f.severity === 'active') : st.findings;
      const services = [...new Set(findings.map((f) => `${f.service.namespace}/${f.service.name}`))];
      const queue = services.slice(0, limits.maxServices);
      const overCap = services.length - queue.length;
      const allowed = new Set<string>();
      // A check that failed for a reason other than a denial is counted: unknown is not "no finding".
      const unchecked: string[] = [];
      const worker = async (): Promise<void> => {
        for (let svc = queue.shift(); svc !== undefined && !res.destroyed; svc = queue.shift()) {
          const [namespace, name] = svc.split('/') as [string, string];
          const attrs: AccessAttributes = recorder
            ? { resource: { verb: 'create', group: '', resource: 'events', namespace } }
            : { resource: { verb: 'get', group: '', resource: 'services', namespace, name } };
          const d = await access.authorize(who.user, attrs, { tokenKey: who.tokenKey, source });
          if (d.ok) allowed.add(svc);
          else if (d.status !== 403) unchecked.push(d.message);
        }
      };
      await Promise.all(Array.from({ length: Math.min(limits.reviewConcurrency, queue.length) }, worker));
      if (res.destroyed) return;
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson', 'Cache-Control': 'no-store' });
      let sent = 0;
      let more = 0;
      for (const f of findings) {
        if (!allowed.has(`${f.service.namespace}/${f.service.name}`)) continue;
        if (sent >= limits.maxFindings) {
          more++;
          continue;
        }
        res.write(
          line({ type: 'finding', ...withFixCommands(f), evidence: cutEvidence(f.evidence, limits.maxEvidenceLines) }),
        );
        sent++;
      }
      res.end(
        line({
          type: 'end',
          node: st.nodeName,
          version: st.version,
          findings: sent,
          ...(more ? { more } : {}),
          ...(unchecked.length + overCap
            ? {
                unchecked: unchecked.length + overCap,
                uncheckedReason: unchecked[0] ?? `more than ${limits.maxServices} Services with findings on this node`,
              }
            : {}),
        }),
      );
    })().catch((e: unknown) => {
      if (!res.headersSent) refuse(res, 500, errText(e));
      else res.destroy();
    });
  };
}
