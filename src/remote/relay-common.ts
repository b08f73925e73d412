// Shared by the relay's /evidence and /status: request limits, fan-out over agent pods, and reading an agent's refusal.
import type { ServerResponse } from 'node:http';
import { CallerSlots, callerKey } from '../agent/evidence-http.js';
import type { UserInfo } from '../cluster/access-review.js';

/** Longest refusal body read from an agent. */
export const MAX_REFUSAL = 4096;

export const ndjson = (o: object): string => `${JSON.stringify(o)}\n`;

/** The message of an error line or Status body, else the body itself; at most 300 characters. */
export function refusalText(body: string): string {
  try {
    const m = (JSON.parse(body.split('\n')[0] ?? '') as { message?: unknown }).message;
    if (typeof m === 'string') return m.slice(0, 300);
  } catch {
    // not JSON
  }
  return body.trim().slice(0, 300) || '(empty answer)';
}

export interface Refusal {
  status: number;
  message: string;
  headers: Record<string, string>;
}

/** A route's requests answered at once, overall and per caller. */
export class RequestLimits {
  private active = 0;
  private readonly slots: CallerSlots;
  constructor(
    private readonly maxRequests: number,
    maxRequestsPerCaller: number,
    /** What the requests are, for the 503's message. */
    private readonly what = 'requests',
  ) {
    this.slots = new CallerSlots({ maxRequestsPerCaller, maxWatchesPerCaller: maxRequestsPerCaller });
  }

  /** Takes a place for `user`'s request until `res` closes; the refusal when there is none. */
  admit(user: UserInfo, res: ServerResponse): Refusal | undefined {
    const slot = this.slots.take(callerKey(user), false);
    if ('error' in slot) return { status: 429, message: slot.error, headers: { 'Retry-After': '5' } };
    res.once('close', slot.release);
    if (this.active >= this.maxRequests)
      return { status: 503, message: `${this.active} ${this.what} are being answered; try again shortly`, headers: {} };
    this.active++;
    res.once('close', () => this.active--);
    return undefined;
  }
}

/** `ask` for every pod, `concurrency` at a time, until the caller goes away; the answers in the order they came. */
export async function eachPod<P, T>(
  pods: readonly P[],
  concurrency: number,
  res: ServerResponse,
  ask: (pod: P) => Promise<T>,
): Promise<T[]> {
  // Each pod's request listens for the caller going away.
  res.setMaxListeners(concurrency + 10);
  const queue = [...pods];
  const out: T[] = [];
  const worker = async (): Promise<void> => {
    for (let pod = queue.shift(); pod !== undefined && !res.destroyed; pod = queue.shift()) out.push(await ask(pod));
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, queue.length) }, worker));
  return out;
}
