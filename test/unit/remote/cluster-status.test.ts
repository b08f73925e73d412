// When `status` may say "nothing active" (exit 0): only when some agent answered, each in full, and every relay line
// parsed; an empty answer (no agent pod, or a --node that matches none) is unknown, not clean.
import { describe, expect, it } from 'vitest';
import { answeredInFull, type ClusterStatus } from '../../../src/remote/cluster-status.js';
import type { StatusNodeLine } from '../../../src/remote/status.js';

const node = (name: string, more: Partial<StatusNodeLine> = {}): StatusNodeLine => ({
  type: 'node',
  node: name,
  status: 'ok',
  findings: 0,
  ...more,
});
const status = (nodes: StatusNodeLine[], malformed: string[] = []): ClusterStatus => ({
  findings: [],
  nodes,
  malformed,
});

describe('answeredInFull', () => {
  it('is true only when some agent answered, each in full, and every line parsed', () => {
    expect(answeredInFull(status([node('a'), node('b', { more: 3 })]))).toBe(true);
    expect(answeredInFull(status([]))).toBe(false);
    expect(answeredInFull(status([node('a'), node('b', { status: 'failed', error: 'timeout' })]))).toBe(false);
    expect(answeredInFull(status([node('a', { unchecked: 40, uncheckedReason: 'SubjectAccessReview: 503' })]))).toBe(
      false,
    );
    expect(answeredInFull(status([node('a')], ['a line that is not JSON']))).toBe(false);
  });
});
