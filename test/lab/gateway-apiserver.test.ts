// Gateway API against a real kube-apiserver v1.20.2 (test/support/kube-control-plane.ts), with the
// DaemonSet's identity (deploy/rbac.yaml as shipped, the ServiceAccount's token):
// - before the CRDs exist every Gateway API list answers 404: the source is absent, with no
//   warning and no error, and the cluster source stays up; collect's list leaves them out quietly;
// - the CRDs installed (test/fixtures/gateway-api/crds.yaml: the v1 kinds, TCPRoute v1alpha2,
//   ReferenceGrant v1beta1; TLSRoute and UDPRoute left out): the ServiceAccount may list and watch
//   each kind and write none, and the running watch picks the kinds up without a restart;
// - a Gateway with its address in status and an accepted HTTPRoute: lab/web gets the Gateway VIP
//   at the listener's port through the watch; a TCPRoute from another namespace reaches it only
//   once a ReferenceGrant allows it; deleting the route takes the VIP away again;
// - collect's list of the same server reads back into the same Gateway VIPs.
// Everything listens on 127.0.0.1 only.
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listClusterObjects } from '../../src/bundle/cluster-list.js';
import { buildClusterView } from '../../src/cluster/build.js';
import { classifyDocuments } from '../../src/cluster/file.js';
import { KubeApi } from '../../src/cluster/kube-api.js';
import { loadApiTarget } from '../../src/cluster/kube-config.js';
import type { ClusterView, ServiceView } from '../../src/cluster/types.js';
import { ClusterWatch } from '../../src/cluster/watch.js';
import { clusterList, LAB } from '../../src/demo/lab.js';
import { gateway, gatewayClass, referenceGrant, route } from '../support/gateway-objects.js';
import { type ControlPlane, startControlPlane } from '../support/kube-control-plane.js';
import { createList, createObject, installCrds } from '../support/kube-objects.js';
import { kubeCacheReady } from '../support/kube-proxy.js';
import { isRoot } from '../support/netns.js';
import { until } from '../support/wait.js';

const DEPLOY = join(import.meta.dirname, '../../deploy');
const CRDS = join(import.meta.dirname, '../fixtures/gateway-api/crds.yaml');
const G = '/apis/gateway.networking.k8s.io';
const GW_IP = '10.0.100.201';

// collect's list asks for discovery.k8s.io/v1 only, which 1.20 does not serve: that error is not this test's.
const gatewayErrors = (errors: string[]) => errors.filter((e) => !e.startsWith('EndpointSlice list:'));
const SLICE_NOTE = 'EndpointSlices: discovery.k8s.io/v1 not served (404), using v1beta1';

const web = (v: ClusterView | undefined): ServiceView | undefined =>
  v?.services.find((s) => s.namespace === 'lab' && s.name === 'web');
const gatewayVips = (v: ClusterView | undefined) =>
  (web(v)?.ingressVips ?? [])
    .filter((iv) => iv.gateway)
    .map((iv) => `${iv.ingress} ${iv.ip} ${iv.gateway!.listeners.map((l) => `${l.port}/${l.protocol}`).join(',')}`);

describe.skipIf(!isRoot || !kubeCacheReady())(
  'Gateway API on a real kube-apiserver v1.20.2 with deploy/rbac.yaml',
  () => {
    let cp: ControlPlane;
    let watch: ClusterWatch | undefined;
    let api: KubeApi;
    let logText = '';

    beforeAll(async () => {
      cp = await startControlPlane();
      cp.kubectl(['apply', '-f', join(DEPLOY, 'namespace.yaml')]);
      cp.kubectl(['apply', '-n', 'clbprobe', '-f', join(DEPLOY, 'rbac.yaml')]);
      // The shipped FlowSchema, with its rule for the Gateway API kinds, is one the server takes.
      cp.kubectl(['apply', '-f', join(DEPLOY, 'flowschema.yaml')]);
      await createList(cp, clusterList('Local') as { items: Record<string, unknown>[] });
      const kubeconfig = cp.kubeconfig('clbprobe');
      api = new KubeApi(loadApiTarget(kubeconfig));
      const lines = new Writable({
        write(chunk: Buffer, _e, cb) {
          logText += chunk.toString();
          cb();
        },
      });
      watch = new ClusterWatch({
        nodeName: LAB.node1Name,
        kubeconfig,
        debounceMs: 50,
        backoffInitialMs: 100,
        backoffMaxMs: 1000,
        crdRecheckMs: 1000,
        log: pino({ level: 'info' }, lines),
      });
      watch.start();
    }, 180_000);

    afterAll(async () => {
      await watch?.stop();
      await cp?.stop();
    });

    it('without the CRDs: every list is a 404, the gateway source is absent, no warning, the cluster source up', async () => {
      expect((await cp.request('GET', `${G}/v1/gateways`, undefined, 'clbprobe')).status).toBe(404);
      const v = await watch!.synced();
      expect(watch!.gatewayApi()).toBe('absent');
      expect(v.fresh).toBe(true);
      expect(watch!.status()).toMatchObject({ source: 'cluster', available: true });
      expect(v.warnings.filter((w) => /gateway|route|referencegrant/i.test(w))).toEqual([]);
      expect(web(v)?.ingressVips).toEqual([]);
      await until('the absent line in the log', 5000, () =>
        logText.includes('Gateway API not installed') ? true : undefined,
      );
      const listed = await listClusterObjects(api);
      expect(gatewayErrors(listed.errors)).toEqual([]);
      expect(
        listed.list.items
          .map((i) => (i as { kind: string }).kind)
          .filter((k) => !['Service', 'EndpointSlice', 'Node'].includes(k)),
      ).toEqual([]);
    }, 60_000);

    it('CRDs installed: the ServiceAccount lists and watches each kind, writes none; kinds without a CRD stay 404', async () => {
      await installCrds(cp, CRDS);
      const served = [
        `${G}/v1/gatewayclasses`,
        `${G}/v1/gateways`,
        `${G}/v1/httproutes`,
        `${G}/v1/grpcroutes`,
        `${G}/v1alpha2/tcproutes`,
        `${G}/v1beta1/referencegrants`,
      ];
      for (const path of served) {
        expect((await cp.request('GET', path, undefined, 'clbprobe')).status, `GET ${path}`).toBe(200);
        expect(
          (await cp.request('GET', `${path}?watch=1&timeoutSeconds=1`, undefined, 'clbprobe')).status,
          `watch ${path}`,
        ).toBe(200);
      }
      for (const path of [`${G}/v1alpha2/tlsroutes`, `${G}/v1alpha2/udproutes`])
        expect((await cp.request('GET', path, undefined, 'clbprobe')).status, path).toBe(404);
      const refused: [string, string, unknown][] = [
        [
          'POST',
          `${G}/v1/namespaces/lab/gateways`,
          gateway({ namespace: 'lab', name: 'x', className: 'c', listeners: [] }),
        ],
        ['POST', `${G}/v1/gatewayclasses`, gatewayClass('x', 'example.com/x')],
        ['DELETE', `${G}/v1/namespaces/lab/httproutes/x`, undefined],
        ['POST', `${G}/v1beta1/namespaces/lab/referencegrants`, referenceGrant('lab', 'x', 'HTTPRoute', 'other')],
      ];
      for (const [method, path, body] of refused)
        expect((await cp.request(method, path, body, 'clbprobe')).status, `${method} ${path}`).toBe(403);
      await until('the watch lists the new kinds', 15_000, () => watch!.gatewayApi() === 'up' || undefined);
      await until('the found line in the log', 5000, () =>
        logText.includes('Gateway API installed') ? true : undefined,
      );
    }, 120_000);

    it('a Gateway and an accepted HTTPRoute arrive through the watch: lab/web gets the Gateway VIP at the listener port', async () => {
      await createObject(cp, gatewayClass('lab-alb', 'gateway.k8s.aws/alb'));
      await createObject(
        cp,
        gateway({
          namespace: 'lab',
          name: 'gw',
          className: 'lab-alb',
          listeners: [
            { name: 'http', port: 80, protocol: 'HTTP', from: 'All' },
            { name: 'pg', port: 5432, protocol: 'TCP', from: 'All' },
          ],
          addresses: [{ type: 'IPAddress', value: GW_IP }],
        }),
      );
      await createObject(
        cp,
        route({
          namespace: 'lab',
          name: 'web',
          parents: [{ name: 'gw', sectionName: 'http' }],
          backends: [{ name: 'web', port: LAB.port }],
          accepted: [true],
        }),
      );
      await until('the Gateway VIP in the view', 15_000, () => gatewayVips(watch!.view()).length > 0 || undefined);
      const v = watch!.view();
      expect(gatewayVips(v)).toEqual([`lab/gw ${GW_IP} 80/TCP`]);
      expect(web(v)!.ingressVips[0]!.gateway).toMatchObject({
        route: 'HTTPRoute lab/web',
        className: 'lab-alb',
        controller: 'gateway.k8s.aws/alb',
      });
      expect(v.warnings).toEqual([SLICE_NOTE]);
    }, 60_000);

    it('watch events: a TCPRoute from another namespace reaches lab/web once a ReferenceGrant allows it; deleting routes takes the VIP away', async () => {
      await createObject(
        cp,
        route({
          kind: 'TCPRoute',
          namespace: 'apps',
          name: 'pg',
          parents: [{ name: 'gw', namespace: 'lab', sectionName: 'pg' }],
          backends: [{ name: 'web', namespace: 'lab', port: LAB.port }],
        }),
      );
      // The route is seen (its own Gateway parent) but not allowed to the backend yet.
      await new Promise((r) => setTimeout(r, 1500));
      expect(gatewayVips(watch!.view())).toEqual([`lab/gw ${GW_IP} 80/TCP`]);
      await createObject(cp, referenceGrant('lab', 'apps-tcp', 'TCPRoute', 'apps', 'web'));
      await until(
        'the granted TCPRoute listener',
        15_000,
        () => gatewayVips(watch!.view())[0] === `lab/gw ${GW_IP} 80/TCP,5432/TCP` || undefined,
      );

      // collect's list of the same server: the Gateway objects, read back into the same VIPs.
      const listed = await listClusterObjects(api);
      expect(gatewayErrors(listed.errors)).toEqual([]);
      const kinds = listed.list.items.map((i) => (i as { kind: string }).kind);
      for (const k of ['GatewayClass', 'Gateway', 'HTTPRoute', 'TCPRoute', 'ReferenceGrant'])
        expect(kinds, k).toContain(k);
      const { objects, warnings } = classifyDocuments([listed.list]);
      expect(warnings).toEqual([]);
      expect(web(buildClusterView(objects, { nodeName: LAB.node1Name }))?.ingressVips).toEqual(
        web(watch!.view())?.ingressVips,
      );

      for (const path of [`${G}/v1/namespaces/lab/httproutes/web`, `${G}/v1alpha2/namespaces/apps/tcproutes/pg`])
        expect((await cp.request('DELETE', path)).status).toBe(200);
      await until(
        'no Gateway VIP once its routes are gone',
        15_000,
        () => gatewayVips(watch!.view()).length === 0 || undefined,
      );
    }, 60_000);
  },
);
