// The workstation side of the relay: one GET through the API server's service proxy, authenticated as kubectl would be,
// with the token repeated in TOKEN_HEADER since the API server strips Authorization; lines are passed on as they come.
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import type { ApiTarget } from '../cluster/kube-config.js';
import { errText } from '../errors.js';
import { UserError } from '../user-error.js';
import { lineSplitter, readRefusal, refusalMessage, refusalText } from './evidence-lines.js';
import { TOKEN_HEADER } from './relay-common.js';

type RelayTarget = { namespace: string; service: string };

/** Streams the relay's answer line by line; resolves when it ends, rejects with a UserError saying what to fix. */
export async function askRelay(
  api: ApiTarget,
  target: RelayTarget,
  query: URLSearchParams,
  onLine: (text: string) => void,
  timeoutMs: number,
  route: 'evidence' | 'status' = 'evidence',
): Promise<void> {
  let opts: RequestOptions;
  try {
    opts = await api.requestOptions();
  } catch (e) {
    throw new UserError(errText(e));
  }
  const headers = (opts.headers ?? {}) as Record<string, string>;
  const authorization = headers.authorization;
  if (!authorization || !/^bearer\s/i.test(authorization)) {
    throw new UserError(
      'the evidence relay needs a bearer token to check your access on each node, and this kubeconfig user has none ' +
        '(a client certificate?): use a token or exec-plugin user, or --via exec (needs pods/exec, deploy/README.md)',
    );
  }
  opts.headers = { ...headers, [TOKEN_HEADER]: authorization, accept: 'application/x-ndjson' };
  const path =
    `/api/v1/namespaces/${encodeURIComponent(target.namespace)}/services/` +
    `${encodeURIComponent(target.service)}/proxy/${route}?${query}`;
  const url = new URL(api.server + path);
  const where = `the evidence relay (service ${target.namespace}/${target.service} through ${url.host})`;
  return new Promise((resolve, reject) => {
    const req = (url.protocol === 'https:' ? httpsRequest : httpRequest)(
      url,
      { ...opts, method: 'GET' },
      (res: IncomingMessage) => {
        if (res.statusCode !== 200)
          return readRefusal(res, (body) => reject(refusal(res.statusCode ?? 0, body, target, where)));
        const lines = lineSplitter(onLine);
        res.on('data', (d: Buffer) => {
          try {
            lines.push(d);
          } catch (e) {
            req.destroy(e as Error);
          }
        });
        res.on('end', () => {
          lines.flush();
          if (res.complete) resolve();
          else reject(new UserError(`${where}: the answer was cut short`));
        });
        res.on('error', (e) => reject(new UserError(`${where}: ${e.message}`)));
      },
    );
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${Math.round(timeoutMs / 1000)} s`)));
    req.on('error', (e) => reject(new UserError(`${where}: ${e.message}`)));
    req.end();
  });
}

/** An error answer from the API server (a Status) or from the relay (an error line), in words that say what to fix. */
function refusal(code: number, body: string, target: RelayTarget, where: string): UserError {
  const msg = refusalText(body);
  // The RBAC hint is read from the whole message: a long user or group name can push it past the cut.
  if (code === 403 && refusalMessage(body).includes('services/proxy')) {
    return new UserError(
      `403 Forbidden: ${msg} (needs RBAC verb "get" on "services/proxy" named ` +
        `${target.service} in namespace ${target.namespace}; see deploy/oncall-rbac.yaml)`,
    );
  }
  if (code === 401) return new UserError(`401 Unauthorized: ${msg}`);
  if (code === 503 && /no endpoints/i.test(msg))
    return new UserError(`${where}: no relay pod is ready (${msg}); is deploy/evidence-relay.yaml applied?`);
  return new UserError(`${code}: ${msg}`);
}
