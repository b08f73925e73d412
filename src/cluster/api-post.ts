// One JSON POST to the API server for calls made without KubeApi (reviews, TokenRequest, Events).
import { request as httpRequest } from 'node:http';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import type { ApiTarget } from './kube-config.js';

export interface PostBounds {
  timeoutMs: number;
  /** Bytes of the answer read. */
  maxBytes: number;
  /** Past maxBytes: fail the request, or keep the text read so far (when only the status matters). */
  overflow: 'fail' | 'cut';
}

/**
 * POSTs `body` as JSON to `path`, again once with a new credential when a plugin's is refused (401); rejects on a
 * transport error, a timeout, or an answer past a failing bound.
 */
export async function postJson(
  target: ApiTarget,
  path: string,
  body: unknown,
  bounds: PostBounds,
): Promise<{ status: number; text: string }> {
  const base = await target.requestOptions();
  const answer = await postOnce(target, base, path, body, bounds);
  if (answer.status !== 401 || !target.refused?.(base)) return answer;
  return postOnce(target, await target.requestOptions(), path, body, bounds);
}

function postOnce(
  target: ApiTarget,
  base: RequestOptions,
  path: string,
  body: unknown,
  bounds: PostBounds,
): Promise<{ status: number; text: string }> {
  const url = new URL(target.server + path);
  const data = Buffer.from(JSON.stringify(body));
  const opts: RequestOptions = {
    ...base,
    method: 'POST',
    headers: {
      ...base.headers,
      accept: 'application/json',
      'content-type': 'application/json',
      'content-length': data.length,
    },
  };
  return new Promise((resolve, reject) => {
    const req = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, opts, (res) => {
      const pieces: Buffer[] = [];
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        if (size > bounds.maxBytes) return;
        size += chunk.length;
        if (size <= bounds.maxBytes || bounds.overflow === 'cut') pieces.push(chunk);
        else {
          reject(new Error(`answer larger than ${bounds.maxBytes} bytes`));
          req.destroy();
        }
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(pieces).toString('utf8') }));
      res.on('error', reject);
    });
    req.setTimeout(bounds.timeoutMs, () => req.destroy(new Error(`no answer within ${bounds.timeoutMs / 1000} s`)));
    req.on('error', reject);
    req.end(data);
  });
}
