// The slices' endpoints hold one copy of each node name: JSON.parse makes every string value
// longer than 10 characters anew (shorter ones it interns), so without the watch's tables each
// endpoint kept its own copy of a name like "ip-10-0-12-34.ec2.internal" (~48 bytes). Measured as
// live heap after full GCs: endpoints whose node names are long cost what short-named ones cost.
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { parsersFor } from '../../../src/cluster/build.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const SLICES = 5000;
const PER_SLICE = 20;

/** Live heap per endpoint held by the parsed slices, their node names made by `nodeName`. */
function bytesPerEndpoint(nodeName: (n: number) => string): number {
  // The JSON text as the API sends it, parsed page by page like the watch does.
  const pages: string[] = [];
  for (let p = 0; p < SLICES / 100; p++) {
    const items = Array.from({ length: 100 }, (_, i) => {
      const s = p * 100 + i;
      return {
        metadata: { name: `s-${s}`, namespace: 'n', labels: { 'kubernetes.io/service-name': `s-${s}` } },
        addressType: 'IPv4',
        ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
        endpoints: Array.from({ length: PER_SLICE }, (_, e) => ({
          addresses: [`10.${128 + (s >> 8)}.${s & 255}.${e}`],
          nodeName: nodeName(s * PER_SLICE + e),
        })),
      };
    });
    pages.push(JSON.stringify({ items }));
  }
  const parse = parsersFor('me').endpointSlices;
  gc();
  gc();
  const before = process.memoryUsage().heapUsed;
  const kept = pages.flatMap((text) =>
    (JSON.parse(text) as { items: object[] }).items.map((object) => parse({ origin: 'x', object })),
  );
  gc();
  gc();
  const after = process.memoryUsage().heapUsed;
  expect(kept).toHaveLength(SLICES);
  return (after - before) / (SLICES * PER_SLICE);
}

describe('endpoint memory', () => {
  it('long node names are held once per name, not once per endpoint', () => {
    // 50 nodes: 2,000 endpoints each. A first run compiles the parsers (its heap is code, not data).
    bytesPerEndpoint((n) => `node-${n % 50}`);
    const short = bytesPerEndpoint((n) => `node-${n % 50}`);
    const long = bytesPerEndpoint((n) => `ip-10-0-${n % 50}-17.eu-west-1.compute.internal`);
    expect(long - short).toBeLessThan(12);
  });
});
