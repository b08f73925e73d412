// local-no-ep and endpoints that terminate while serving: kube-proxy forwards ETP=Local traffic to them when the
// node has no ready endpoint (ProxyTerminatingEndpoints, GA in 1.28), so they are no missing local endpoint.
import { describe, expect, it } from 'vitest';
import type { EndpointView } from '../../../src/cluster/types.js';
import { diagnose } from '../../../src/detect/index.js';
import { loadCase } from './fixture-bundle.js';

/** The gce-guest-local-route case (shop/api: ETP=Local, no local endpoint) with `endpoint` added on this node. */
function localNoEpWith(endpoint?: Omit<EndpointView, 'local' | 'address'>) {
  const { c, input } = loadCase('gce-guest-local-route');
  for (const s of input.cluster.services) {
    if (s.namespace !== 'shop' || s.name !== 'api' || !endpoint) continue;
    s.endpoints = [...s.endpoints, { address: '10.64.0.99', local: true, ...endpoint, nodeName: c.nodeName }];
  }
  return diagnose(input).findings.filter((f) => f.mechanism === 'local-no-ep' && f.service.name === 'api');
}

describe('local-no-ep and terminating endpoints', () => {
  it('no local endpoint: the finding', () => {
    expect(localNoEpWith()).toHaveLength(1);
  });

  it('a local endpoint not ready and not serving: still the finding', () => {
    expect(localNoEpWith({ ready: false })).toHaveLength(1);
  });

  it('the local endpoint terminating but serving (a rollout): no finding', () => {
    expect(localNoEpWith({ ready: false, servingTerminating: true })).toEqual([]);
  });
});
