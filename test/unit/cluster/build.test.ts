import { describe, expect, it } from 'vitest';
import { interpretAnnotations, isPrivateIp } from '../../../src/cluster/annotations.js';
import { buildClusterView, parsersFor } from '../../../src/cluster/build.js';
import { type SliceEntry, slicePort } from '../../../src/cluster/endpoints.js';
import { loadClusterFile } from '../../../src/cluster/file.js';
import { emptyObjects } from '../../../src/cluster/objects.js';
import type { ServiceView } from '../../../src/cluster/types.js';

const FIX = new URL('../../fixtures/cluster/', import.meta.url).pathname;

function svc(views: ServiceView[], ns: string, name: string, portName = ''): ServiceView {
  const found = views.find((s) => s.namespace === ns && s.name === name && s.portName === portName);
  if (!found) throw new Error(`no ServiceView ${ns}/${name}:${portName}`);
  return found;
}

describe('buildClusterView on a kubectl List', () => {
  const view = loadClusterFile(`${FIX}kubectl-list.json`, { nodeName: 'node-a', syncedAt: '2024-05-20T03:00:00.000Z' });

  it('reads the whole fixture without warnings, one ServiceView per port, sorted', () => {
    expect(view.warnings).toEqual([]);
    expect(view.fresh).toBe(true);
    expect(view.syncedAt).toBe('2024-05-20T03:00:00.000Z');
    expect(view.services.map((s) => `${s.namespace}/${s.name}:${s.portName}/${s.protocol}`)).toEqual([
      'default/api:http/TCP',
      'default/dual:/TCP',
      'default/proxied:tcp/TCP',
      'default/web:http/TCP',
      'default/web:https/TCP',
      'kube-system/kube-dns:dns/UDP',
      'kube-system/kube-dns:dns-tcp/TCP',
      'shop/cart:http/TCP',
      'shop/orders:grpc/TCP',
    ]);
  });

  it('ETP=Local LoadBalancer with a Tencent internal subnet: ports, health check, local and remote endpoints', () => {
    const web = svc(view.services, 'default', 'web', 'http');
    expect(web).toMatchObject({
      type: 'LoadBalancer',
      port: 80,
      targetPort: 8080,
      nodePort: 30080,
      healthCheckNodePort: 31847,
      clusterIPs: ['172.16.252.200'],
      lbIngress: [{ ip: '10.0.0.100', ipMode: 'VIP' }],
      externalTrafficPolicy: 'Local',
      internalTrafficPolicy: 'Cluster',
      internalLb: true,
      ingressVips: [{ ingress: 'default/site', ip: '10.0.0.200' }],
    });
    expect(web.annotations.internalByAnnotation).toEqual({
      key: 'service.kubernetes.io/qcloud-loadbalancer-internal-subnetid',
      value: 'subnet-3kd8x0pq',
    });
    // last-applied-configuration and the read-only loadbalance-id are not loopback-relevant.
    expect(Object.keys(web.annotations.raw)).toEqual(['service.kubernetes.io/qcloud-loadbalancer-internal-subnetid']);
    expect(web.endpoints).toEqual([
      {
        address: '10.244.1.17',
        nodeName: 'node-a',
        ready: true,
        local: true,
      },
      expect.objectContaining({ address: '10.244.2.31', nodeName: 'node-b', local: false, ready: true }),
      expect.objectContaining({ address: '10.244.1.9', local: true, ready: false }),
    ]);
    expect(web.endpointPorts).toBe(8080);
    // The https port takes the slice port of the same name (the same endpoint objects, held once), and no Ingress routes to it.
    const https = svc(view.services, 'default', 'web', 'https');
    expect(https.endpoints).toBe(web.endpoints);
    expect(https.endpoints.map((e) => slicePort(https, e))).toEqual([8443, 8443, 8443]);
    expect(https.ingressVips).toEqual([]);
  });

  it('ETP=Cluster with prevent-loopback and an existing CLB; Ingress default backend by port number', () => {
    const api = svc(view.services, 'default', 'api', 'http');
    expect(api.externalTrafficPolicy).toBe('Cluster');
    expect(api.annotations.tencentPreventLoopback).toBe(true);
    expect(api.annotations.existingLb).toEqual({ key: 'service.kubernetes.io/tke-existed-lbid', value: 'lb-7h2kq9xa' });
    // No internal annotation: internal because every LB IP is private.
    expect(api.annotations.internalByAnnotation).toBeUndefined();
    expect(api.internalLb).toBe(true);
    expect(api.ingressVips).toEqual([{ ingress: 'default/site', ip: '10.0.0.200' }]);
    expect(api.endpoints.map((e) => [e.address, e.local])).toEqual([['10.244.2.15', false]]);
  });

  it('ipMode Proxy, a public IP, a named targetPort and a loadBalancerClass', () => {
    const p = svc(view.services, 'default', 'proxied', 'tcp');
    expect(p.lbIngress).toEqual([{ ip: '203.0.113.10', ipMode: 'Proxy' }]);
    expect(p.internalLb).toBe(false);
    expect(p.targetPort).toBe('tcp-main');
    expect(p.loadBalancerClass).toBe('example.com/proxy-lb');
    expect(p.endpoints).toEqual([]);
  });

  it('dual-stack: both cluster IPs and LB IPs (IPv6 made canonical), endpoints from both slices', () => {
    const d = svc(view.services, 'default', 'dual');
    expect(d.clusterIPs).toEqual(['172.16.253.30', 'fd00:10:96::5a1']);
    expect(d.lbIngress).toEqual([
      { ip: '10.0.0.102', ipMode: 'VIP' },
      { ip: 'fd00:0:0:1::66', ipMode: 'VIP' },
    ]);
    expect(d.annotations.internalByAnnotation?.key).toBe('service.beta.kubernetes.io/azure-load-balancer-internal');
    expect(d.endpoints.map((e) => [e.address, e.local])).toEqual([
      ['10.244.1.21', true],
      ['fd00:10:244:1::15', true],
    ]);
  });

  it('Alibaba hostname: no LB IP for kube-proxy to bind, hostname kept, intranet and existing SLB recognised', () => {
    const cart = svc(view.services, 'shop', 'cart', 'http');
    expect(cart.lbIngress).toEqual([]);
    expect(cart.lbHostnames).toEqual(['cart.shop.internal.example.com']);
    expect(cart.annotations.alibabaHostname).toBe('cart.shop.internal.example.com');
    expect(cart.annotations.internalByAnnotation?.value).toBe('intranet');
    expect(cart.annotations.existingLb?.value).toBe('lb-uf6x2a9p3q7r8s1t0v');
    expect(cart.internalLb).toBe(true);
    // Conditions with only `ready` set.
    expect(cart.endpoints[0]).toMatchObject({ ready: true, local: true });
  });

  it('AWS NLB scheme internal with a hostname-only status, and ITP=Local', () => {
    const o = svc(view.services, 'shop', 'orders', 'grpc');
    expect(o.internalLb).toBe(true);
    expect(o.internalTrafficPolicy).toBe('Local');
    expect(o.lbHostnames?.[0]).toMatch(/elb\.us-west-2\.amazonaws\.com$/);
  });

  it('multi-port ClusterIP Service: endpoints matched by port name and protocol', () => {
    const udp = svc(view.services, 'kube-system', 'kube-dns', 'dns');
    expect(udp.protocol).toBe('UDP');
    expect(udp.nodePort).toBeUndefined();
    expect(udp.endpoints.map((e) => slicePort(udp, e))).toEqual([53]);
    expect(svc(view.services, 'kube-system', 'kube-dns', 'dns-tcp').endpoints).toHaveLength(1);
  });

  it('node view: addresses (IPv6 canonical) and both pod CIDRs of this node only', () => {
    expect(view.node).toEqual({
      name: 'node-a',
      addresses: [
        { type: 'InternalIP', address: '10.0.1.11' },
        { type: 'InternalIP', address: 'fd00::1:11' },
        { type: 'Hostname', address: 'node-a' },
      ],
      podCIDRs: ['10.244.1.0/24', 'fd00:10:244:1::/64'],
    });
  });

  it('seen from another node, the same endpoints are remote', () => {
    const b = loadClusterFile(`${FIX}kubectl-list.json`, { nodeName: 'node-b' });
    expect(svc(b.services, 'default', 'web', 'http').endpoints.map((e) => e.local)).toEqual([false, true, false]);
    expect(b.node?.podCIDRs).toEqual(['10.244.2.0/24']);
  });

  it('warns when this node is not among the Nodes', () => {
    const v = loadClusterFile(`${FIX}kubectl-list.json`, { nodeName: 'node-z' });
    expect(v.node).toBeUndefined();
    expect(v.warnings).toEqual(['node "node-z" not found: its addresses and pod CIDRs are unknown']);
  });
});

describe('buildClusterView on malformed objects', () => {
  const view = loadClusterFile(`${FIX}malformed-objects.json`, { nodeName: 'node-a' });

  it('names every bad object or part in a warning and keeps the rest', () => {
    expect(view.warnings).toEqual([
      'items[6] (Ingress): apiVersion "networking.k8s.io/v1beta1" is not supported (want networking.k8s.io/v1), skipped',
      'ignored objects of kinds the cluster view does not use: 1 Pod, 1 (no kind)',
      'items[4] (EndpointSlice default/lb-abcde): endpoints[0].addresses[0] is not an IP address ("10.244.1.300")',
      'items[4] (EndpointSlice default/lb-abcde): endpoints[1].conditions.ready is not a boolean',
      'items[5] (Ingress default/no-port): spec.rules[0].http.paths[0].backend.service.port has neither number nor name',
      'items[0] (Service default/x): spec.ports[0].port is not a number',
      'items[1] (Service): metadata.name is missing',
      'items[2] (Service default/odd): spec.type "Balanced" is unknown',
      'items[3] (Service default/lb): status.loadBalancer.ingress[0].ip is not an IP address ("10.0.0.9O")',
      'items[3] (Service default/lb): status.loadBalancer.ingress[1].ipMode "Direct" is unknown',
      'items[7] (Node node-a): status.addresses is not a list',
      'node "node-a" not found: its addresses and pod CIDRs are unknown',
    ]);
  });

  it('keeps the good port of a Service with a bad one, and the good parts of the LB Service', () => {
    expect(view.services.map((s) => `${s.name}:${s.port}`)).toEqual(['lb:80', 'x:9100']);
    const lb = svc(view.services, 'default', 'lb');
    expect(lb.lbIngress).toEqual([{ ip: '10.0.0.92', ipMode: 'VIP' }]);
    // The Ingress path with a port still routes; an empty conditions object means ready.
    expect(lb.ingressVips).toEqual([{ ingress: 'default/no-port', ip: '10.0.0.201' }]);
    expect(lb.endpoints).toEqual([{ address: '10.244.1.32', nodeName: 'node-a', ready: true, local: true }]);
    expect(lb.endpointPorts).toBe(8080);
  });
});

describe('buildClusterView edge cases', () => {
  it('defaults: ClusterIP type, TCP, targetPort = port, Cluster policies, headless has no VIP', () => {
    const objects = emptyObjects();
    objects.services.push({
      origin: 'watch',
      object: { metadata: { name: 'h', namespace: 'ns' }, spec: { clusterIP: 'None', ports: [{ port: 7000 }] } },
    });
    const [v] = buildClusterView(objects).services;
    expect(v).toMatchObject({
      type: 'ClusterIP',
      protocol: 'TCP',
      port: 7000,
      targetPort: 7000,
      portName: '',
      clusterIPs: [],
      externalTrafficPolicy: 'Cluster',
      internalTrafficPolicy: 'Cluster',
      internalLb: false,
    });
  });

  it('an Ingress reaches a port by name only when the Service port has that name', () => {
    const objects = emptyObjects();
    objects.services.push({
      origin: 'a',
      object: { metadata: { name: 's', namespace: 'n' }, spec: { ports: [{ name: 'web', port: 80 }, { port: 81 }] } },
    });
    objects.ingresses.push({
      origin: 'b',
      object: {
        metadata: { name: 'i', namespace: 'n' },
        spec: { defaultBackend: { service: { name: 's', port: { name: 'web' } } } },
        status: { loadBalancer: { ingress: [{ ip: '10.1.1.1' }, { hostname: 'lb.example' }] } },
      },
    });
    // Same name in another namespace does not count.
    objects.ingresses.push({
      origin: 'c',
      object: {
        metadata: { name: 'j', namespace: 'other' },
        spec: { defaultBackend: { service: { name: 's', port: { number: 81 } } } },
        status: { loadBalancer: { ingress: [{ ip: '10.1.1.2' }] } },
      },
    });
    const v = buildClusterView(objects);
    expect(v.warnings).toEqual([]);
    expect(v.services.map((s) => s.ingressVips)).toEqual([[{ ingress: 'n/i', ip: '10.1.1.1' }], []]);
  });

  it('a slice without the service-name label, or an FQDN slice, gives no endpoints and no warning', () => {
    const objects = emptyObjects();
    objects.services.push({
      origin: 'a',
      object: { metadata: { name: 's', namespace: 'n' }, spec: { ports: [{ port: 80 }] } },
    });
    const ep = { addresses: ['10.0.0.1'] };
    objects.endpointSlices.push(
      {
        origin: 'b',
        object: {
          metadata: { name: 'x', namespace: 'n' },
          addressType: 'IPv4',
          endpoints: [ep],
          ports: [{ port: 80 }],
        },
      },
      {
        origin: 'c',
        object: {
          metadata: { name: 'y', namespace: 'n', labels: { 'kubernetes.io/service-name': 's' } },
          addressType: 'FQDN',
          endpoints: [{ addresses: ['db.example'] }],
          ports: [{ port: 80 }],
        },
      },
    );
    const v = buildClusterView(objects);
    expect(v.warnings).toEqual([]);
    expect(v.services[0]?.endpoints).toEqual([]);
  });

  it('an address listed in two slices (during an update) appears once', () => {
    const objects = emptyObjects();
    objects.services.push({
      origin: 'a',
      object: { metadata: { name: 's', namespace: 'n' }, spec: { ports: [{ port: 80 }] } },
    });
    for (const name of ['s-1', 's-2']) {
      objects.endpointSlices.push({
        origin: name,
        object: {
          metadata: { name, namespace: 'n', labels: { 'kubernetes.io/service-name': 's' } },
          addressType: 'IPv4',
          endpoints: [{ addresses: ['10.0.0.1'], nodeName: 'me' }],
          ports: [{ name: '', port: 8080, protocol: 'TCP' }],
        },
      });
    }
    expect(buildClusterView(objects, { nodeName: 'me' }).services[0]?.endpoints).toHaveLength(1);
  });

  it("a port served by one slice shares that slice's endpoint list; two slices give a merged copy", () => {
    const objects = emptyObjects();
    objects.services.push({
      origin: 'a',
      object: {
        metadata: { name: 's', namespace: 'n' },
        spec: {
          ports: [
            { name: 'http', port: 80 },
            { name: 'm', port: 9000 },
          ],
        },
      },
    });
    const slice = (name: string, address: string) => ({
      origin: name,
      object: {
        metadata: { name, namespace: 'n', labels: { 'kubernetes.io/service-name': 's' } },
        addressType: 'IPv4',
        endpoints: [{ addresses: [address], nodeName: 'me' }],
        ports: [
          { name: 'http', port: 8080 },
          { name: 'm', port: 9090 },
        ],
      },
    });
    objects.endpointSlices.push(slice('s-1', '10.0.0.1'));
    const one = buildClusterView(objects, { nodeName: 'me' }).services;
    const again = buildClusterView(objects, { nodeName: 'me' }).services;
    expect(one.map((v) => v.endpoints.map((e) => `${e.address}:${slicePort(v, e)} ${e.local}`))).toEqual([
      ['10.0.0.1:8080 true'],
      ['10.0.0.1:9090 true'],
    ]);
    // Each build parses again: equal lists, not the same (sharing is between a store and its views).
    expect(again[0]!.endpoints).toEqual(one[0]!.endpoints);
    objects.endpointSlices.push(slice('s-2', '10.0.0.2'));
    const two = buildClusterView(objects, { nodeName: 'other' }).services;
    expect(two.map((v) => v.endpoints.map((e) => `${e.address}:${slicePort(v, e)} ${e.local}`))).toEqual([
      ['10.0.0.1:8080 false', '10.0.0.2:8080 false'],
      ['10.0.0.1:9090 false', '10.0.0.2:9090 false'],
    ]);
    // Slices that agree on the port number: one number for the port; the merged list holds the slices' own objects.
    expect(two.map((v) => v.endpointPorts)).toEqual([8080, 9090]);
  });

  it('slices with equal port lists share one frozen list (per parsers); different lists stay apart', () => {
    const parse = parsersFor('me').endpointSlices;
    const slice = (name: string, ports: object[]) => ({
      origin: name,
      object: {
        metadata: { name, namespace: 'n', labels: { 'kubernetes.io/service-name': name } },
        addressType: 'IPv4',
        endpoints: [],
        ports,
      },
    });
    const http = [{ name: 'http', port: 8080, protocol: 'TCP' }];
    const a = parse(slice('a', http)) as SliceEntry;
    const b = parse(slice('b', structuredClone(http))) as SliceEntry;
    const c = parse(slice('c', [{ name: 'http', port: 8081, protocol: 'TCP' }])) as SliceEntry;
    const d = parse(slice('d', [{ name: 'http', protocol: 'TCP' }])) as SliceEntry;
    expect(a.ports).toEqual([{ name: 'http', protocol: 'TCP', port: 8080 }]);
    expect(b.ports).toBe(a.ports);
    expect(c.ports).not.toBe(a.ports);
    expect(d.ports).toEqual([{ name: 'http', protocol: 'TCP', port: undefined }]);
    expect(d.ports).not.toBe(a.ports);
    expect(Object.isFrozen(a.ports) && Object.isFrozen(a.ports[0])).toBe(true);
    // Another parsers' slices have their own lists.
    expect((parsersFor('me').endpointSlices(slice('e', http)) as SliceEntry).ports).not.toBe(a.ports);
  });

  it("slices that give one port different numbers: each endpoint at its own slice's, an address at two numbers kept twice", () => {
    const objects = emptyObjects();
    objects.services.push({
      origin: 'a',
      object: {
        metadata: { name: 's', namespace: 'n' },
        spec: { ports: [{ name: 'http', port: 80, targetPort: 'web' }] },
      },
    });
    const slice = (name: string, addresses: string[], port: number) => ({
      origin: name,
      object: {
        metadata: { name, namespace: 'n', labels: { 'kubernetes.io/service-name': 's' } },
        addressType: 'IPv4',
        endpoints: addresses.map((a) => ({ addresses: [a], nodeName: 'me' })),
        ports: [{ name: 'http', port }],
      },
    });
    objects.endpointSlices.push(
      slice('old', ['10.0.0.1', '10.0.0.2'], 8080),
      slice('new', ['10.0.0.1', '10.0.0.3'], 8081),
    );
    const [v] = buildClusterView(objects, { nodeName: 'me' }).services;
    expect(v!.endpoints.map((e) => `${e.address}:${slicePort(v!, e)}`)).toEqual([
      '10.0.0.1:8080',
      '10.0.0.2:8080',
      '10.0.0.1:8081',
      '10.0.0.3:8081',
    ]);
    expect(v!.endpointPorts).toBeInstanceOf(Map);
  });

  it('never throws on garbage', () => {
    const objects = emptyObjects();
    for (const junk of [
      null,
      'x',
      [],
      { metadata: 'm' },
      { metadata: { name: 5 } },
      { metadata: { name: 'a' }, spec: [] },
    ]) {
      objects.services.push({ origin: 'j', object: junk });
      objects.endpointSlices.push({ origin: 'j', object: junk });
      objects.ingresses.push({ origin: 'j', object: junk });
      objects.nodes.push({ origin: 'j', object: junk });
    }
    const v = buildClusterView(objects, { nodeName: 'a' });
    expect(v.services).toEqual([]);
    expect(v.warnings.length).toBeGreaterThan(20);
  });
});

describe('annotations', () => {
  it('one shared, frozen interpretation per annotation set', () => {
    const key = 'service.kubernetes.io/qcloud-loadbalancer-internal-subnetid';
    const a = interpretAnnotations({ [key]: 'subnet-1', other: 'x' });
    const b = interpretAnnotations({ other: 'y', [key]: 'subnet-1' });
    const c = interpretAnnotations({ [key]: 'subnet-2' });
    expect(b).toBe(a);
    expect(c).not.toBe(a);
    expect(c.internalByAnnotation).toEqual({ key, value: 'subnet-2' });
    expect(Object.isFrozen(a) && Object.isFrozen(a.raw) && Object.isFrozen(a.internalByAnnotation)).toBe(true);
    expect(interpretAnnotations({ unrelated: '1' })).toBe(interpretAnnotations({}));
    expect(interpretAnnotations({})).toEqual({ raw: {} });
  });

  it('AWS in-tree internal: any value but "false"', () => {
    const key = 'service.beta.kubernetes.io/aws-load-balancer-internal';
    expect(interpretAnnotations({ [key]: '0.0.0.0/0' }).internalByAnnotation).toEqual({ key, value: '0.0.0.0/0' });
    expect(interpretAnnotations({ [key]: 'false' }).internalByAnnotation).toBeUndefined();
  });

  it('GCP current and legacy keys, legacy Alibaba alicloud- prefix, prevent-loopback "false"', () => {
    expect(
      interpretAnnotations({ 'networking.gke.io/load-balancer-type': 'Internal' }).internalByAnnotation,
    ).toBeDefined();
    expect(
      interpretAnnotations({ 'cloud.google.com/load-balancer-type': 'internal' }).internalByAnnotation,
    ).toBeDefined();
    expect(
      interpretAnnotations({ 'networking.gke.io/load-balancer-type': 'External' }).internalByAnnotation,
    ).toBeUndefined();
    expect(
      interpretAnnotations({ 'service.beta.kubernetes.io/alicloud-loadbalancer-hostname': 'h.example' })
        .alibabaHostname,
    ).toBe('h.example');
    expect(
      interpretAnnotations({ 'service.beta.kubernetes.io/alibaba-cloud-loadbalancer-address-type': 'internet' })
        .internalByAnnotation,
    ).toBeUndefined();
    const off = interpretAnnotations({ 'service.cloud.tencent.com/prevent-loopback': 'false' });
    expect(off.tencentPreventLoopback).toBe(false);
    expect(off.raw).toEqual({ 'service.cloud.tencent.com/prevent-loopback': 'false' });
  });

  it('private ranges', () => {
    expect(['10.1.2.3', '172.31.0.1', '192.168.9.9', '100.64.0.5', 'fd00::1'].map(isPrivateIp)).toEqual([
      true,
      true,
      true,
      true,
      true,
    ]);
    expect(['172.32.0.1', '8.8.8.8', '2001:db8::1', '100.128.0.1'].map(isPrivateIp)).toEqual([
      false,
      false,
      false,
      false,
    ]);
  });
});
