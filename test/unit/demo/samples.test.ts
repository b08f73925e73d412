// The demo reads its counters back from the agent's /metrics text; this is that parser.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseSamples } from '../../../src/export/parse-samples.js';

const golden = readFileSync(join(import.meta.dirname, '../export/metrics.golden.txt'), 'utf8');

describe('parseSamples', () => {
  it('reads every sample of the golden /metrics output, labels and value', () => {
    const s = parseSamples(golden);
    const sampleLines = golden.split('\n').filter((l) => l && !l.startsWith('#'));
    expect(s).toHaveLength(sampleLines.length);
    expect(s).toContainEqual({
      name: 'clbprobe_lb_path_packets_total',
      labels: { namespace: 'shop', service: 's0', port: '80', protocol: 'TCP', kind: 'loop_return' },
      value: 4,
    });
    expect(s).toContainEqual({ name: 'clbprobe_series_dropped_total', labels: {}, value: 0 });
  });

  it('keeps escaped quotes in label values and skips lines that are not samples', () => {
    const text = 'x{a="say \\"hi\\"",b="2"} 1.5\nnot a sample\n{broken="1"} 2\ny 3e2\ntruncated{a="1"';
    expect(parseSamples(text)).toEqual([
      { name: 'x', labels: { a: 'say \\"hi\\"', b: '2' }, value: 1.5 },
      { name: 'y', labels: {}, value: 300 },
    ]);
  });
});
