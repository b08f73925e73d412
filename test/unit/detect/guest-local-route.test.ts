// guest-local-route on the fixture clusters with the table-local routes captured in a namespace
// (test/fixtures/routes): a guest agent's local route is reported as what it is, never as a
// kube-ipvs0 binding, and it changes where pod traffic goes only when kube-proxy leaves the IP.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { diagnose } from '../../../src/detect/index.js';
import type { DiagnoseInput, Finding } from '../../../src/detect/types.js';
import { localRoutesOf } from '../../../src/source/local-routes.js';
import { loadCase } from './fixture-bundle.js';

const ROUTES = join(import.meta.dirname, '../../fixtures/routes');
const captured = localRoutesOf(
  readFileSync(join(ROUTES, 'gce-guest-agent.local.v4.json'), 'utf8'),
  'ip-route-local.json',
  4,
).routes;

const of = (input: DiagnoseInput, mechanism: string, svc: string): Finding[] =>
  diagnose(input).findings.filter((f) => f.mechanism === mechanism && f.service.name === svc);

function withRoutes(input: DiagnoseInput, routes = captured): DiagnoseInput {
  return { ...input, node: { ...input.node, localRoutes: { routes } } };
}

describe('guest-local-route', () => {
  it('IPVS node, ipMode Proxy IP with the guest route: risk naming the route; no drift, hc-drop or L4-loop from it', () => {
    const { input } = loadCase('gce-guest-local-route');
    const [web] = of(input, 'guest-local-route', 'web');
    expect(web?.severity).toBe('risk');
    expect(web?.evidence[0]).toBe('local 192.0.2.10 dev eth0 proto 66 scope host');
    expect(web?.evidence).toContain('192.0.2.10 is not bound on kube-ipvs0');
    expect(web?.summary).toContain('never reaches the LB');
    expect(of(input, 'drift', 'web')).toEqual([]);
    expect(of(input, 'hc-drop', 'web')).toEqual([]);
    expect(of(input, 'port-refused', 'web')).toEqual([]);
    const [api] = of(input, 'guest-local-route', 'api');
    expect(api?.severity).toBe('info');
    expect(api?.summary).toContain('not a kube-ipvs0 binding');
  });

  it('without the routes, the same node reads as before: the Proxy IP leaves for the LB, hc-drop credits ipMode Proxy', () => {
    const { input } = loadCase('gce-guest-local-route');
    const { localRoutes: _r, ...node } = input.node;
    const plain = { ...input, node };
    expect(of(plain, 'guest-local-route', 'web')).toEqual([]);
    expect(of(plain, 'hc-drop', 'web').map((f) => f.severity)).toEqual(['info']);
    expect(of(plain, 'proxy-mode', 'web')[0]?.summary).toContain('pod traffic goes to the LB');
  });

  it('iptables mode: kube-proxy DNATs the LB IP first, so the route is context (info) and nothing else changes', () => {
    const { input } = loadCase('iptables-1.29-nft-no-loop');
    const routed = withRoutes(input);
    expect(of(routed, 'guest-local-route', 'web').map((f) => f.severity)).toEqual(['info']);
    const others = (i: DiagnoseInput) =>
      diagnose(i)
        .findings.filter((f) => f.mechanism !== 'guest-local-route')
        .map((f) => `${f.mechanism} ${f.severity} ${f.service.name}`);
    expect(others(routed)).toEqual(others(input));
  });

  it('a route for a prefix (an alias range) covers the LB IPs inside it; a route elsewhere covers nothing', () => {
    const { input } = loadCase('gce-guest-local-route');
    const range = withRoutes(input, [{ family: 4, dst: '192.0.2.0/28', dev: 'eth0', protocol: '66' }]);
    expect(of(range, 'guest-local-route', 'web')[0]?.evidence[0]).toBe(
      'local 192.0.2.0/28 dev eth0 proto 66 scope host',
    );
    const elsewhere = withRoutes(input, [{ family: 4, dst: '198.51.100.7/32', dev: 'eth0', protocol: '66' }]);
    expect(diagnose(elsewhere).findings.filter((f) => f.mechanism === 'guest-local-route')).toEqual([]);
  });
});
