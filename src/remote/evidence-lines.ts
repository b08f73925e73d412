// The lines agents and the relay answer with, split from a byte stream and checked; a line past MAX_EVIDENCE_LINE
// means the peer is no agent, so reading stops.

import type { IncomingMessage } from 'node:http';
import type { EvidenceLine } from '../agent/evidence.js';
import { arrOf, isObj as isObject, isStr } from '../cluster/fields.js';
import { errText } from '../errors.js';

const MAX_EVIDENCE_LINE = 1 << 20;

export class EvidenceLineError extends Error {}

export interface LineSplitter {
  push(b: Buffer): void;
  /** The last line when the stream did not end with a newline. */
  flush(): void;
}

/** Calls onLine with each complete line; push throws EvidenceLineError on a line past MAX_EVIDENCE_LINE bytes. */
export function lineSplitter(onLine: (line: string) => void): LineSplitter {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const tooLong = (): never => {
    pending = [];
    pendingBytes = 0;
    throw new EvidenceLineError(`a line of the answer is longer than ${MAX_EVIDENCE_LINE} bytes`);
  };
  return {
    push(chunk) {
      let from = 0;
      for (let nl = chunk.indexOf(10); nl >= 0; nl = chunk.indexOf(10, from)) {
        if (pendingBytes + nl - from > MAX_EVIDENCE_LINE) tooLong();
        pending.push(chunk.subarray(from, nl));
        const line = Buffer.concat(pending).toString('utf8');
        pending = [];
        pendingBytes = 0;
        from = nl + 1;
        onLine(line);
      }
      if (from < chunk.length) {
        pending.push(chunk.subarray(from));
        pendingBytes += chunk.length - from;
        if (pendingBytes > MAX_EVIDENCE_LINE) tooLong();
      }
    },
    flush() {
      if (pendingBytes) onLine(Buffer.concat(pending).toString('utf8'));
      pending = [];
      pendingBytes = 0;
    },
  };
}

/** One agent's evidence answer as it is read: its entries, whether it ended, and the errors it reported. */
export class EvidenceTally {
  entries = 0;
  ended = false;
  readonly errors: string[] = [];

  /** The line as an EvidenceLine, counted; undefined, its error kept, when it is none. */
  read(text: string): EvidenceLine | undefined {
    try {
      const l = parseEvidenceLine(text);
      if (l.type === 'entry') this.entries++;
      if (l.type === 'end') this.ended = true;
      if (l.type === 'error') this.errors.push(l.message);
      return l;
    } catch (e) {
      this.errors.push(errText(e));
      return undefined;
    }
  }
}

/** A relay's or agent's line as a JSON object, or what else it is. */
export function jsonObject(text: string): Record<string, unknown> | 'not JSON' | 'not an object' {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return 'not JSON';
  }
  return isObject(value) ? value : 'not an object';
}

/** The message of an error line or Status body, else the body itself. */
export function refusalMessage(body: string): string {
  const line = jsonObject(body.split('\n')[0] ?? '');
  const message = typeof line === 'object' && typeof line.message === 'string' ? line.message : undefined;
  return message ?? (body.trim() || '(empty answer)');
}

/** refusalMessage() cut to 300 characters for display. */
export const refusalText = (body: string): string => refusalMessage(body).slice(0, 300);

/** Reads a refused answer's first 4 KiB (a Status or an error line is a few hundred bytes), then calls `onEnd`. */
export function readRefusal(res: IncomingMessage, onEnd: (body: string) => void): void {
  let body = '';
  res.setEncoding('utf8');
  res.on('data', (d: string) => {
    if (body.length < 4096) body += d;
  });
  res.on('end', () => onEnd(body));
}

// Arrays pass as objects here (a port or endpoint item only has to be an object for the text form).
const isObj = (v: unknown): boolean => typeof v === 'object' && v !== null;
/** What each type must carry for the text form (cli/evidence-text.ts) to print it. */
const SHAPES: Record<string, (l: Record<string, unknown>) => boolean> = {
  service: (l) => {
    const s = l.service as Record<string, unknown> | null;
    return (
      isStr(l.node) &&
      isObj(s) &&
      isStr(s!.namespace) &&
      isStr(s!.name) &&
      arrOf(s!.vips, isStr) &&
      arrOf(s!.ports, isObj) &&
      arrOf(s!.endpoints, isObj)
    );
  },
  entry: (l) => isStr(l.class) && isStr(l.line) && isStr(l.firstSeen),
  end: (l) => Number.isInteger(l.entries),
  error: (l) => isStr(l.message),
};

/** One answer line as an EvidenceLine; an EvidenceLineError saying why it is not one. */
export function parseEvidenceLine(text: string): EvidenceLine {
  const value = jsonObject(text);
  if (value === 'not JSON')
    throw new EvidenceLineError(`the agent sent a line that is not JSON: ${text.slice(0, 120)}`);
  return evidenceLineOf(value, text);
}

/** A parsed answer line (`text`, for the error) as an EvidenceLine; an EvidenceLineError saying why it is not one. */
export function evidenceLineOf(parsed: unknown, text: string): EvidenceLine {
  const type = (parsed as { type?: unknown } | null)?.type;
  const shape = typeof type === 'string' && Object.hasOwn(SHAPES, type) ? SHAPES[type] : undefined;
  if (!shape) throw new EvidenceLineError(`the agent sent a line of no known type: ${text.slice(0, 120)}`);
  if (!shape(parsed as Record<string, unknown>))
    throw new EvidenceLineError(`the agent sent a ${String(type)} line without its fields: ${text.slice(0, 120)}`);
  return parsed as EvidenceLine;
}
