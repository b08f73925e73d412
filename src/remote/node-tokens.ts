// The relay's short-lived TokenRequest tokens bound to one node's evidence audience (clbprobe-evidence:NODE), useless
// against the API server or other nodes; kept until 2 minutes before expiry.
import { evidenceAudience } from '../agent/evidence-http.js';
import { postJson } from '../cluster/api-post.js';
import { isObj } from '../cluster/fields.js';
import type { ApiTarget } from '../cluster/kube-config.js';
import { jsonObject } from './evidence-lines.js';

/** The API server's minimum for a TokenRequest. */
const NODE_TOKEN_TTL_S = 600;
const RENEW_BEFORE_MS = 120_000;
/** Nodes whose tokens are kept (a cluster has at most 5,000 nodes). */
const MAX_NODES = 5000;
const MAX_ANSWER = 64 << 10;

export type MintToken = (
  audience: string,
  expirationSeconds: number,
) => Promise<{ token: string; expiresAtMs: number }>;

/** TokenRequest for `sa` through `target` (needs "create" on serviceaccounts/token of that one account). */
export function tokenRequester(target: ApiTarget, sa: { namespace: string; name: string }): MintToken {
  const account = `${encodeURIComponent(sa.namespace)}/serviceaccounts/${encodeURIComponent(sa.name)}`;
  const path = `/api/v1/namespaces/${account}/token`;
  return async (audience, expirationSeconds) => {
    const request = {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenRequest',
      spec: { audiences: [audience], expirationSeconds },
    };
    const reply = await postJson(target, path, request, { timeoutMs: 10_000, maxBytes: MAX_ANSWER, overflow: 'fail' });
    const parsed = jsonObject(reply.text);
    const answer = typeof parsed === 'object' ? parsed : {};
    const status = isObj(answer.status) ? answer.status : {};
    if (reply.status !== 201 && reply.status !== 200) {
      throw new Error(
        `TokenRequest for ${sa.namespace}/${sa.name}: ${reply.status} ` +
          `${typeof answer.message === 'string' ? answer.message : reply.text.slice(0, 200)}`,
      );
    }
    const { token } = status;
    const expires = Date.parse(String(status.expirationTimestamp ?? ''));
    if (typeof token !== 'string' || !token || !Number.isFinite(expires))
      throw new Error(`TokenRequest for ${sa.namespace}/${sa.name}: no token in the answer`);
    return { token, expiresAtMs: expires };
  };
}

/** One token per node, minted on first use and renewed before it expires; concurrent askers share one request. */
export class NodeTokens {
  private readonly tokens = new Map<string, Promise<{ token: string; expiresAtMs: number }>>();
  constructor(private readonly mint: MintToken) {}

  async forNode(node: string): Promise<string> {
    const held = this.tokens.get(node);
    if (held) {
      const t = await held.catch(() => undefined);
      if (t && t.expiresAtMs - RENEW_BEFORE_MS > Date.now()) return t.token;
      if (this.tokens.get(node) !== held) return this.forNode(node);
    }
    const p = this.mint(evidenceAudience(node), NODE_TOKEN_TTL_S);
    this.tokens.delete(node);
    this.tokens.set(node, p);
    while (this.tokens.size > MAX_NODES) this.tokens.delete(this.tokens.keys().next().value!);
    try {
      return (await p).token;
    } catch (e) {
      if (this.tokens.get(node) === p) this.tokens.delete(node);
      throw e;
    }
  }
}
