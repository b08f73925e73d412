// node-name-mismatch on the fixture cluster (kubectl's JSON of the shop Services and their
// EndpointSlices, node-a with pod CIDR 10.244.1.0/24): the endpoints of node-a's pods filed under
// another name are reported; endpoints that are simply remote, or an overlap of one address while
// this node's name is in use, stay quiet.
import { describe, expect, it } from 'vitest';
import type { EndpointView, ServiceView } from '../../../src/cluster/types.js';
import { diagnose } from '../../../src/detect/index.js';
import type { DiagnoseInput, Finding } from '../../../src/detect/types.js';
import { loadCase } from './fixture-bundle.js';

const mismatches = (input: DiagnoseInput): Finding[] =>
  diagnose(input).findings.filter((f) => f.mechanism === 'node-name-mismatch');

/** The case's input with every endpoint passed through `f` (locality recomputed from the view's node name). */
function withEndpoints(input: DiagnoseInput, f: (ep: EndpointView, s: ServiceView) => EndpointView[]): DiagnoseInput {
  const own = input.cluster.nodeName;
  const services = input.cluster.services.map((s) => ({
    ...s,
    endpoints: s.endpoints.flatMap((ep) => f(ep, s)).map((ep) => ({ ...ep, local: ep.nodeName === own })),
  }));
  return { ...input, cluster: { ...input.cluster, services } };
}

describe('node-name-mismatch', () => {
  it('reports the ETP=Local Service whose endpoints at this node are filed under its FQDN, with the names as evidence', () => {
    const { input } = loadCase('hostname-override-mismatch');
    const found = mismatches(input);
    expect(found.map((f) => `${f.service.name} ${f.severity}`)).toEqual(['api risk']);
    const f = found[0]!;
    expect(f.summary).toContain('filed under "node-a.internal", not this node\'s name "node-a"');
    expect(f.evidence).toContain(
      'endpoint 10.244.1.6:8080 (ready) filed under nodeName "node-a.internal", at an address of this node',
    );
    expect(f.evidence).toContain('"node-a.internal" is the FQDN of "node-a"');
    expect(f.evidence).toContain('no endpoint of any Service is filed under "node-a"');
    expect(f.remedy).toMatch(/--hostname-override/);
    // The remote endpoint of shop/web (node-b, 10.244.2.9) is not quoted anywhere.
    expect(found.flatMap((x) => x.evidence).join('\n')).not.toContain('10.244.2.9');
  });

  it('quotes the first endpoints of many and counts the rest', () => {
    const { input } = loadCase('hostname-override-mismatch');
    // Each endpoint of node-a's pods under the other name becomes 8 (10.244.1.6 -> 10.244.1.60 ... 10.244.1.67).
    const many = withEndpoints(input, (ep) =>
      ep.address === '10.244.1.6' ? Array.from({ length: 8 }, (_, i) => ({ ...ep, address: `10.244.1.6${i}` })) : [ep],
    );
    const f = mismatches(many)[0]!;
    expect(f.summary).toMatch(
      /^8 endpoint\(s\) of this node's pods \(10\.244\.1\.60, 10\.244\.1\.61, 10\.244\.1\.62 and 5 more\)/,
    );
    expect(f.evidence.filter((l) => l.startsWith('endpoint '))).toHaveLength(5);
    expect(f.evidence).toContain('(3 more endpoints of this node filed under "node-a.internal")');
  });

  it('is quiet when the endpoints are filed under this node or are simply remote', () => {
    expect(mismatches(loadCase('iptables-1.29-nft-no-loop').input)).toEqual([]);
    const { input } = loadCase('hostname-override-mismatch');
    // The same names, at addresses outside this node's pod CIDR: remote pods of a node called node-a.internal.
    const remote = withEndpoints(input, (ep) => [{ ...ep, address: ep.address.replace('10.244.1.', '10.244.7.') }]);
    expect(mismatches(remote)).toEqual([]);
  });

  it('is quiet when any endpoint is filed under this node (an address of its CIDR used elsewhere, e.g. Calico blocks)', () => {
    const { input } = loadCase('hostname-override-mismatch');
    const mixed = withEndpoints(input, (ep, s) =>
      s.name === 'web' && ep.nodeName === 'node-a.internal' ? [{ ...ep, nodeName: 'node-a' }] : [ep],
    );
    expect(mixed.cluster.services.some((s) => s.endpoints.some((e) => e.local))).toBe(true);
    expect(mismatches(mixed)).toEqual([]);
  });

  it("is quiet when this node's addresses are filed under several names (not one rename)", () => {
    const { input } = loadCase('hostname-override-mismatch');
    const two = withEndpoints(input, (ep, s) =>
      s.name === 'web' && ep.nodeName === 'node-a.internal' ? [{ ...ep, nodeName: 'node-c' }] : [ep],
    );
    expect(mismatches(two)).toEqual([]);
  });

  it('says info with a caveat when only the pod CIDR ties an unrelated name to this node; risk when a node address does', () => {
    const { input } = loadCase('hostname-override-mismatch');
    const renamed = withEndpoints(input, (ep) => [
      { ...ep, nodeName: ep.nodeName === 'node-a.internal' ? 'worker-17' : ep.nodeName },
    ]);
    const [f] = mismatches(renamed);
    expect(f?.severity).toBe('info');
    expect(f?.summary).toContain('only the pod CIDR says these addresses are this node');
    // A hostNetwork pod's endpoint is the node's own address: no doubt whose it is.
    const hostNet = withEndpoints(renamed, (ep, s) =>
      s.name === 'api' ? [ep, { ...ep, address: '10.0.3.11' }] : [ep],
    );
    const [g] = mismatches(hostNet);
    expect(g?.severity).toBe('risk');
    expect(g?.evidence).toContain(
      'endpoint 10.0.3.11:8080 (ready) filed under nodeName "worker-17", at an address of this node',
    );
  });

  it("blames the agent's own name when no Node object has it", () => {
    const { input } = loadCase('hostname-override-mismatch');
    const { node: _node, ...withoutNode } = input.cluster;
    const [f] = mismatches({ ...input, cluster: withoutNode });
    expect(f?.severity).toBe('info');
    expect(f?.summary).toContain('no Node object is named "node-a"');
    expect(f?.remedy).toContain('--node-name "node-a.internal"');
  });

  it('says nothing without a node name to compare with', () => {
    const { input } = loadCase('hostname-override-mismatch');
    const { nodeName: _n, ...anonymous } = input.cluster;
    expect(mismatches({ ...input, cluster: anonymous })).toEqual([]);
  });
});
