// Gateway API as a cluster source: which Service ports a Gateway's addresses reach (accepted
// parents, listeners by section and protocol, backendRefs, ReferenceGrants), the VIP index at the
// listeners' ports, hostnames through the node's resolver, bad objects as warnings, and the L7-loop
// finding through a Gateway on a fixture node (test/fixtures/bundles/l7-gateway-*).
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ServiceIndex } from '../../../src/agent/service-index.js';
import { buildClusterView } from '../../../src/cluster/build.js';
import { classifyDocuments, loadClusterFile } from '../../../src/cluster/file.js';
import { JsonStreamError, reduceText, SkippedObject } from '../../../src/cluster/json-reduce.js';
import { DEFAULT_API_LIMITS } from '../../../src/cluster/kube-api.js';
import { lbHostnamesOf, withLbHostnames } from '../../../src/cluster/lb-hostnames.js';
import { LbServiceIndex } from '../../../src/cluster/lb-index.js';
import { eventShape, listShape, OBJECT_SHAPES } from '../../../src/cluster/object-shapes.js';
import type { ClusterView, ServiceView } from '../../../src/cluster/types.js';
import { diagnose } from '../../../src/detect/index.js';
import { type GatewayOptions, gateway, gatewayClass, referenceGrant, route } from '../../support/gateway-objects.js';
import { BUNDLES, loadCase } from '../detect/fixture-bundle.js';

const GW_IP = '203.0.113.80';

function service(
  namespace: string,
  name: string,
  ports: { port: number; protocol?: string; nodePort: number }[],
): Record<string, unknown> {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace },
    spec: {
      type: 'NodePort',
      clusterIP: '10.96.0.10',
      ports: ports.map((p) => ({ ...p, protocol: p.protocol ?? 'TCP', targetPort: 8080 })),
    },
  };
}

const WEB = service('shop', 'web', [
  { port: 80, nodePort: 30080 },
  { port: 8443, nodePort: 30443 },
]);

const GW: GatewayOptions = {
  namespace: 'shop',
  name: 'gw',
  className: 'alb',
  listeners: [
    { name: 'http', port: 80, protocol: 'HTTP' },
    { name: 'https', port: 443, protocol: 'HTTPS' },
    { name: 'tcp', port: 5432, protocol: 'TCP' },
    { name: 'dns', port: 53, protocol: 'UDP' },
  ],
  addresses: [{ type: 'IPAddress', value: GW_IP }],
};

function viewOf(...items: Record<string, unknown>[]): ClusterView {
  const { objects, warnings } = classifyDocuments([{ apiVersion: 'v1', kind: 'List', items }]);
  expect(warnings).toEqual([]);
  return buildClusterView(objects, { nodeName: 'node-a' });
}

const port = (v: ClusterView, name: string, p: number): ServiceView =>
  v.services.find((s) => s.name === name && s.port === p)!;
const vipsOf = (s: ServiceView) =>
  s.ingressVips.map((iv) => ({
    via: iv.ingress,
    ip: iv.ip,
    listeners: iv.gateway?.listeners.map((l) => `${l.port}/${l.protocol}`),
  }));

describe('Gateway API: the Service ports a Gateway reaches', () => {
  it('an accepted HTTPRoute: the Gateway address at its HTTP(S) listeners, for the backend port only', () => {
    const v = viewOf(
      WEB,
      gatewayClass('alb', 'gateway.k8s.aws/alb'),
      gateway(GW),
      route({
        namespace: 'shop',
        name: 'r',
        parents: [{ name: 'gw' }],
        backends: [{ name: 'web', port: 80 }],
        accepted: [true],
      }),
    );
    expect(vipsOf(port(v, 'web', 80))).toEqual([{ via: 'shop/gw', ip: GW_IP, listeners: ['80/TCP', '443/TCP'] }]);
    expect(port(v, 'web', 80).ingressVips[0]!.gateway).toMatchObject({
      gateway: 'shop/gw',
      route: 'HTTPRoute shop/r',
      className: 'alb',
      controller: 'gateway.k8s.aws/alb',
    });
    expect(port(v, 'web', 8443).ingressVips).toEqual([]);

    const lb = new LbServiceIndex(v);
    expect(lb.vipServices(GW_IP, 'TCP', 80)?.map((s) => s.port)).toEqual([80]);
    expect(lb.vipServices(GW_IP, 'TCP', 443)?.map((s) => s.port)).toEqual([80]);
    // Not an Ingress: nothing at a port the route's listeners do not have.
    expect(lb.vipServices(GW_IP, 'TCP', 5432)).toBeUndefined();
    expect(lb.ingressVipServices(GW_IP)?.map((s) => s.port)).toEqual([80]);
    const targets = new ServiceIndex(v, { nodeIps: ['10.0.3.11'], podCidrs: ['10.244.1.0/24'], ipvsIps: [] }).targets();
    expect(
      targets.vips
        .filter((t) => t.address === GW_IP)
        .map((t) => `${t.port}/${t.proto}`)
        .sort(),
    ).toEqual(['443/tcp', '80/tcp']);
  });

  it('parents: Accepted=False attaches nothing; without status the parentRef decides; a section name picks its listener', () => {
    const rejected = viewOf(
      WEB,
      gateway(GW),
      route({
        namespace: 'shop',
        name: 'r',
        parents: [{ name: 'gw' }],
        backends: [{ name: 'web', port: 80 }],
        accepted: [false],
      }),
    );
    expect(port(rejected, 'web', 80).ingressVips).toEqual([]);
    const noStatus = viewOf(
      WEB,
      gateway(GW),
      route({
        namespace: 'shop',
        name: 'r',
        parents: [{ name: 'gw', sectionName: 'https' }],
        backends: [{ name: 'web', port: 80 }],
      }),
    );
    expect(vipsOf(port(noStatus, 'web', 80))).toEqual([{ via: 'shop/gw', ip: GW_IP, listeners: ['443/TCP'] }]);
    // An accepted parent the spec no longer names does not count.
    const stale = route({
      namespace: 'shop',
      name: 'r',
      parents: [{ name: 'gw' }],
      backends: [{ name: 'web', port: 80 }],
      accepted: [true],
    });
    (stale.spec as { parentRefs: unknown[] }).parentRefs = [{ name: 'other' }];
    expect(port(viewOf(WEB, gateway(GW), stale), 'web', 80).ingressVips).toEqual([]);
  });

  it('route kinds attach to their protocols: TCPRoute to TCP listeners, UDPRoute to UDP ones', () => {
    const dns = service('shop', 'dns', [{ port: 53, protocol: 'UDP', nodePort: 30053 }]);
    const db = service('shop', 'db', [{ port: 5432, nodePort: 30432 }]);
    const v = viewOf(
      dns,
      db,
      gateway(GW),
      route({
        kind: 'TCPRoute',
        namespace: 'shop',
        name: 't',
        parents: [{ name: 'gw' }],
        backends: [{ name: 'db', port: 5432 }],
      }),
      route({
        kind: 'UDPRoute',
        namespace: 'shop',
        name: 'u',
        parents: [{ name: 'gw' }],
        backends: [{ name: 'dns', port: 53 }],
      }),
    );
    expect(vipsOf(port(v, 'db', 5432))[0]!.listeners).toEqual(['5432/TCP']);
    expect(vipsOf(port(v, 'dns', 53))[0]!.listeners).toEqual(['53/UDP']);
    expect(new LbServiceIndex(v).vipServices(GW_IP, 'UDP', 53)?.map((s) => s.name)).toEqual(['dns']);
  });

  it('cross-namespace: a backendRef needs a ReferenceGrant in the Service namespace; a route from another namespace needs a listener that allows it', () => {
    const r = route({
      namespace: 'shop',
      name: 'r',
      parents: [{ name: 'gw' }],
      backends: [{ name: 'web', namespace: 'backend', port: 80 }],
      accepted: [true],
    });
    const backendWeb = service('backend', 'web', [{ port: 80, nodePort: 31080 }]);
    expect(port(viewOf(backendWeb, gateway(GW), r), 'web', 80).ingressVips).toEqual([]);
    expect(
      port(viewOf(backendWeb, gateway(GW), r, referenceGrant('backend', 'g', 'HTTPRoute', 'shop', 'other')), 'web', 80)
        .ingressVips,
    ).toEqual([]);
    expect(
      port(viewOf(backendWeb, gateway(GW), r, referenceGrant('backend', 'g', 'GRPCRoute', 'shop')), 'web', 80)
        .ingressVips,
    ).toEqual([]);
    expect(
      vipsOf(
        port(viewOf(backendWeb, gateway(GW), r, referenceGrant('backend', 'g', 'HTTPRoute', 'shop', 'web')), 'web', 80),
      ),
    ).toHaveLength(1);

    const teamWeb = service('team', 'web', [{ port: 80, nodePort: 31081 }]);
    const fromTeam = route({
      namespace: 'team',
      name: 'r',
      parents: [{ name: 'gw', namespace: 'shop' }],
      backends: [{ name: 'web', port: 80 }],
    });
    expect(port(viewOf(teamWeb, gateway(GW), fromTeam), 'web', 80).ingressVips).toEqual([]);
    const open = gateway({ ...GW, listeners: [{ name: 'http', port: 80, protocol: 'HTTP', from: 'All' }] });
    expect(vipsOf(port(viewOf(teamWeb, open, fromTeam), 'web', 80))).toEqual([
      { via: 'shop/gw', ip: GW_IP, listeners: ['80/TCP'] },
    ]);
  });

  it('a Gateway without an address yet, or with a NamedAddress only, reaches nothing', () => {
    const r = route({ namespace: 'shop', name: 'r', parents: [{ name: 'gw' }], backends: [{ name: 'web', port: 80 }] });
    expect(port(viewOf(WEB, gateway({ ...GW, addresses: undefined }), r), 'web', 80).ingressVips).toEqual([]);
    expect(
      port(viewOf(WEB, gateway({ ...GW, addresses: [{ type: 'NamedAddress', value: 'pool-1' }] }), r), 'web', 80)
        .ingressVips,
    ).toEqual([]);
  });

  it('a Hostname address is looked up as hostname-only LBs are, and its answer is the Gateway VIP', () => {
    const name = 'k8s-shop-gw-0123.elb.eu-west-1.amazonaws.com';
    const v = viewOf(
      WEB,
      gateway({ ...GW, addresses: [{ type: 'Hostname', value: `${name.toUpperCase()}.` }] }),
      route({ namespace: 'shop', name: 'r', parents: [{ name: 'gw' }], backends: [{ name: 'web', port: 80 }] }),
    );
    expect(port(v, 'web', 80).ingressVips).toEqual([]);
    expect(lbHostnamesOf(v)).toEqual([name]);
    const resolved = withLbHostnames(
      v,
      new Map([
        [name, { hostname: name, addresses: [GW_IP], ttlS: 30, resolvedAt: '2026-11-28T00:00:00Z', resolver: 'test' }],
      ]),
    );
    expect(port(resolved, 'web', 80).ingressVips.map((iv) => [iv.ingress, iv.ip, iv.resolvedFrom])).toEqual([
      ['shop/gw', GW_IP, name],
    ]);
    expect(new LbServiceIndex(resolved).vipServices(GW_IP, 'TCP', 443)?.map((s) => s.name)).toEqual(['web']);
    // The view it came from is unchanged.
    expect(port(v, 'web', 80).ingressVips).toEqual([]);
  });

  it('a Gateway hostname without an answer is an L7-loop risk saying the loop is unknown (fixture node, no lookup)', () => {
    const { input } = loadCase('l7-gateway-hostname-loop');
    const unresolved = loadClusterFile(join(BUNDLES, 'l7-gateway-hostname-loop', 'cluster.json'), {
      nodeName: 'node-a',
    });
    const l7 = diagnose({ ...input, cluster: unresolved }).findings.filter((f) => f.mechanism === 'L7-loop');
    expect(l7.map((f) => f.severity)).toEqual(['risk']);
    expect(l7[0]!.summary).toMatch(
      /^Gateway shop\/shop-gw publishes only the hostname k8s-shop-shopgw-\S+, which has no address on this node \(not resolved\): whether pods calling it are sent back to their own node is unknown$/,
    );
    // Resolved, the same traffic is the active loop and the unknown is gone.
    expect(
      diagnose(input)
        .findings.filter((f) => f.mechanism === 'L7-loop')
        .map((f) => f.severity),
    ).toEqual(['active']);
  });

  it('bad objects and bad parts are warnings naming them; the rest of the object is kept', () => {
    const bad = gateway({
      ...GW,
      listeners: [
        { name: 'http', port: 80, protocol: 'HTTP' },
        { name: 'bad', port: 70000, protocol: 'HTTP' },
      ],
      addresses: [{ type: 'IPAddress', value: 'not-an-ip' }, { value: GW_IP }],
    });
    const badRoute = route({
      namespace: 'shop',
      name: 'r',
      parents: [{ name: 'gw' }],
      backends: [{ name: 'web' }, { name: 'web', port: 80 }],
    });
    const { objects } = classifyDocuments([
      {
        apiVersion: 'v1',
        kind: 'List',
        items: [
          WEB,
          bad,
          badRoute,
          { apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', spec: {} },
          {
            apiVersion: 'gateway.networking.k8s.io/v1',
            kind: 'Gateway',
            metadata: { name: 'x', namespace: 'shop' },
            spec: { listeners: 'many' },
          },
        ],
      },
    ]);
    const v = buildClusterView(objects, { nodeName: 'node-a' });
    expect(v.warnings).toEqual([
      'items[1] (Gateway shop/gw): spec.listeners[1].port is out of range (70000)',
      'items[1] (Gateway shop/gw): status.addresses[0].value is not an IP address ("not-an-ip")',
      'items[4] (Gateway shop/x): spec.listeners is not a list',
      'items[2] (HTTPRoute shop/r): spec.rules[0].backendRefs[0].port is missing (required for a Service)',
      'items[3] (HTTPRoute): metadata is missing',
      `node "node-a" not found: its addresses and pod CIDRs are unknown`,
    ]);
    expect(vipsOf(port(v, 'web', 80))).toEqual([{ via: 'shop/gw', ip: GW_IP, listeners: ['80/TCP'] }]);
  });

  it('Gateway kinds at a version the view does not read are skipped with a warning', () => {
    const { warnings } = classifyDocuments([
      { apiVersion: 'v1', kind: 'List', items: [{ ...gateway(GW), apiVersion: 'gateway.networking.k8s.io/v1alpha1' }] },
    ]);
    expect(warnings).toEqual([
      expect.stringContaining('apiVersion "gateway.networking.k8s.io/v1alpha1" is not supported'),
    ]);
  });
});

describe('Gateway API objects as the watch reads them: bounded, truncated', () => {
  const limits = { maxValueBytes: DEFAULT_API_LIMITS.maxValueBytes, maxUnitBytes: DEFAULT_API_LIMITS.maxEventBytes };

  it('a Gateway is read to the fields the view uses; one past its bound is skipped, named, not held', () => {
    const kept = reduceText(
      JSON.stringify({
        type: 'ADDED',
        object: { ...gateway(GW), metadata: { name: 'gw', namespace: 'shop', managedFields: [{ manager: 'x' }] } },
      }),
      eventShape(OBJECT_SHAPES.gateways),
      limits,
    );
    expect(JSON.stringify(kept)).not.toContain('managedFields');
    // Items of a watch carry no kind the view needs: the watch files them by collection.
    const object = {
      apiVersion: 'gateway.networking.k8s.io/v1',
      kind: 'Gateway',
      ...(kept as { object: Record<string, unknown> }).object,
    };
    expect(
      vipsOf(
        port(
          viewOf(
            WEB,
            object,
            route({ namespace: 'shop', name: 'r', parents: [{ name: 'gw' }], backends: [{ name: 'web', port: 80 }] }),
          ),
          'web',
          80,
        ),
      ),
    ).toHaveLength(1);
    const listeners = Array.from({ length: 3000 }, (_, i) => ({ name: `l${i}`, port: 1 + i, protocol: 'HTTP' }));
    const fat = reduceText(
      JSON.stringify({ type: 'ADDED', object: gateway({ ...GW, listeners }) }),
      eventShape(OBJECT_SHAPES.gateways),
      limits,
    ) as { object: unknown };
    expect(fat.object).toBeInstanceOf(SkippedObject);
    expect((fat.object as SkippedObject).label).toBe('Gateway shop/gw');
  });

  it('a list page cut off in the middle of a route is an error, not a shorter list', () => {
    const page = JSON.stringify({
      metadata: { resourceVersion: '7' },
      items: [
        route({ namespace: 'shop', name: 'r', parents: [{ name: 'gw' }], backends: [{ name: 'web', port: 80 }] }),
      ],
    });
    expect(() => reduceText(page.slice(0, page.length - 40), listShape(OBJECT_SHAPES.httpRoutes), limits)).toThrow(
      JsonStreamError,
    );
  });
});

describe('L7-loop through a Gateway (fixture node, the l7-ingress-loop traffic)', () => {
  for (const name of ['l7-gateway-loop', 'l7-gateway-hostname-loop']) {
    it(`${name}: active, naming the Gateway, its route and the provider's options`, () => {
      const { input } = loadCase(name);
      const [loop, ...more] = diagnose(input).findings.filter(
        (f) => f.mechanism === 'L7-loop' && f.service.name === 'web',
      );
      expect(more).toEqual([]);
      expect(loop!.severity).toBe('active');
      expect(loop!.summary).toMatch(
        / to Gateway shop\/shop-gw VIP 10\.0\.0\.50:80 were proxied back to this node's NodePort 10\.0\.3\.11:30080/,
      );
      expect(loop!.evidence).toContain(
        'Gateway shop/shop-gw (class aws-alb, controller gateway.k8s.aws/alb) listeners 80/TCP: HTTPRoute shop/web → shop/web:80',
      );
      expect(loop!.remedy).toContain(
        'Gateway shop/shop-gw: make its LB stop bringing the client address to this node: target type ip',
      );
      expect(loop!.remedy).toContain('preserve_client_ip.enabled=false');
      expect(loop!.path?.hops.map((h) => h.role).slice(0, 3)).toEqual(['client pod', 'Gateway VIP', 'node NodePort']);
    });
  }
});
