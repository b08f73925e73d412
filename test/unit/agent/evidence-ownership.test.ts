// Evidence ownership (issue 36, finding 1): a tenant asking the evidence socket about a Service of
// its own gets only connections that facts it cannot forge tie to that Service, never another
// tenant's. Each case builds the cluster view with the real builders from Kubernetes objects,
// keeps conntrack entries in the agent's real table, and asks the real evidence socket.
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConntrackTable } from '../../../src/agent/conntrack-table.js';
import { EvidenceAnswers, startEvidenceServer } from '../../../src/agent/evidence-server.js';
import { ServiceIndex } from '../../../src/agent/service-index.js';
import type { ClusterView } from '../../../src/cluster/types.js';
import {
  entry,
  type Flow,
  ingress,
  MANAGED,
  MIRRORED,
  NODE,
  NODE_IP,
  POD_CIDR,
  service,
  slice,
  viewOf,
} from '../../support/evidence-objects.js';
import { gateway, route } from '../../support/gateway-objects.js';

const dir = mkdtempSync(join(tmpdir(), 'cbo-evidence-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let seq = 0;

/**
 * The ids of the kept entries the evidence socket returns for NS/NAME, as the agent serves them
 * (its table, its Service index's find); also the ids the table keeps for that Service at all, so
 * that each case shows the entry is matched (counted) and only the evidence answer leaves it out.
 */
async function evidenceIds(
  view: ClusterView,
  flows: Flow[],
  ref: string,
): Promise<{ returned: number[]; kept: number[] }> {
  const index = new ServiceIndex(view, { nodeIps: [NODE_IP], ipvsIps: [], podCidrs: [POD_CIDR] });
  const table = new ConntrackTable(index);
  for (const f of flows) table.upsert(entry(f), 1000 + f.id);
  const [ns, name] = ref.split('/') as [string, string];
  const kept = [...table.entries()]
    .filter((k) => k.svcs.some((s) => s.namespace === ns && s.name === name))
    .map((k) => k.entry.id);
  const path = join(dir, `o${seq++}.sock`);
  const server = await startEvidenceServer(
    path,
    new EvidenceAnswers({
      table: () => table,
      find: (n, m, p) => index.find(n, m, p),
      nodeName: NODE,
    }),
  );
  try {
    const lines = await new Promise<Record<string, any>[]>((resolve, reject) => {
      const s = createConnection(path);
      const chunks: Buffer[] = [];
      s.on('data', (c) => chunks.push(c));
      s.on('error', reject);
      s.on('end', () =>
        resolve(
          Buffer.concat(chunks)
            .toString('utf8')
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l) as Record<string, any>),
        ),
      );
      s.write(`${JSON.stringify({ service: ref })}\n`);
    });
    expect(lines.at(-1)?.type).toBe('end');
    return {
      returned: lines
        .filter((l) => l.type === 'entry')
        .map((l) => l.entry.id as number)
        .sort((a, b) => a - b),
      kept: kept.sort((a, b) => a - b),
    };
  } finally {
    await new Promise((r) => server.close(r));
  }
}

describe('evidence ownership: (a) a shared Ingress VIP', () => {
  const SHARED_VIP = '203.0.113.80';
  const objects = [
    service('victim', 'web', { type: 'NodePort', clusterIP: '10.96.0.10', port: 80, nodePort: 30081 }),
    slice('victim', 'web', MANAGED, ['10.244.1.50'], 80),
    ingress('victim', 'site', 'web', 80, SHARED_VIP),
    // The tenant's own Service and an Ingress to it: the shared controller writes the same VIP.
    service('attacker', 'evil', { type: 'NodePort', clusterIP: '10.96.0.66', port: 80, nodePort: 30066 }),
    slice('attacker', 'evil', MANAGED, ['10.244.1.66'], 80),
    ingress('attacker', 'evil', 'evil', 80, SHARED_VIP),
  ];
  const flows: Flow[] = [
    // A victim pod to the shared VIP (the L7 LB's; nothing on this node rewrites it).
    { id: 1, dst: SHARED_VIP, dport: 443 },
    { id: 2, dst: SHARED_VIP, dport: 80 },
    // The L7 LB's legs into this node: to the victim's NodePort, and to the tenant's.
    { id: 3, src: '35.191.0.5', dst: NODE_IP, dport: 30081, replySrc: '10.244.1.50', replySport: 80 },
    { id: 4, src: '35.191.0.6', dst: NODE_IP, dport: 30066, replySrc: '10.244.1.66', replySport: 80 },
    // A client of the tenant's own ClusterIP, answered by its own pod.
    { id: 5, dst: '10.96.0.66', dport: 80, replySrc: '10.244.1.66', replySport: 80 },
  ];

  it("the tenant's Ingress to its own Service does not get everyone's connections to the shared VIP", async () => {
    const { returned, kept } = await evidenceIds(viewOf(objects), flows, 'attacker/evil');
    // The agent still counts the VIP flows for every Service behind the VIP (unchanged)...
    expect(kept).toEqual([1, 2, 4, 5]);
    // ...but evidence comes only through the tenant's own NodePort and backends.
    expect(returned).toEqual([4, 5]);
  });

  it("the victim's own evidence is its NodePort leg, not the tenant's", async () => {
    const { returned } = await evidenceIds(viewOf(objects), flows, 'victim/web');
    expect(returned).toEqual([3]);
  });

  it("a shared VIP that is the ingress controller's own LB IP is the controller Service's evidence alone", async () => {
    const withController = [
      ...objects,
      service('ingress-nginx', 'controller', {
        type: 'LoadBalancer',
        clusterIP: '10.96.0.2',
        port: 443,
        status: [{ ip: SHARED_VIP }],
      }),
      slice('ingress-nginx', 'controller', MANAGED, ['10.244.1.2'], 443),
    ];
    const viaController: Flow[] = [{ id: 7, dst: SHARED_VIP, dport: 443, replySrc: '10.244.1.2', replySport: 443 }];
    expect((await evidenceIds(viewOf(withController), viaController, 'attacker/evil')).returned).toEqual([]);
    expect((await evidenceIds(viewOf(withController), viaController, 'ingress-nginx/controller')).returned).toEqual([
      7,
    ]);
  });
});

describe('evidence ownership: (b) an LB hostname the tenant chose', () => {
  const DB_CLUSTER_IP = '10.96.0.50';
  const victimDb = [
    service('victim', 'db', { clusterIP: DB_CLUSTER_IP, port: 5432 }),
    slice('victim', 'db', MANAGED, ['10.244.1.40'], 5432),
  ];
  /** DigitalOcean's CCM writes the annotation's name into the status; the tenant's DNS answers it. */
  const chosen = (hostname: string) =>
    service('attacker', 'dbproxy', {
      type: 'LoadBalancer',
      clusterIP: '10.96.0.67',
      port: 5432,
      annotations: { 'service.beta.kubernetes.io/do-loadbalancer-hostname': hostname },
      status: [{ hostname }],
    });

  it("a name answering a database's ClusterIP does not claim the database's connections", async () => {
    const view = viewOf([...victimDb, chosen('db.attacker.example')], { 'db.attacker.example': [DB_CLUSTER_IP] });
    const flows: Flow[] = [{ id: 1, dst: DB_CLUSTER_IP, dport: 5432, replySrc: '10.244.1.40', replySport: 5432 }];
    const { returned, kept } = await evidenceIds(view, flows, 'attacker/dbproxy');
    expect(kept).toEqual([1]);
    expect(returned).toEqual([]);
  });

  it('a name answering any outside address does not claim who on this node talks to it', async () => {
    const view = viewOf([...victimDb, chosen('db.attacker.example')], { 'db.attacker.example': ['198.51.100.7'] });
    const flows: Flow[] = [{ id: 1, dst: '198.51.100.7', dport: 5432 }];
    const { returned, kept } = await evidenceIds(view, flows, 'attacker/dbproxy');
    expect(kept).toEqual([1]);
    expect(returned).toEqual([]);
  });

  it('a name the cloud wrote (AWS NLB) still gives its Service the connections to its addresses', async () => {
    const nlb = 'k8s-shop-cart-0123456789.elb.eu-west-1.amazonaws.com';
    const view = viewOf(
      [
        ...victimDb,
        service('shop', 'cart', {
          type: 'LoadBalancer',
          clusterIP: '10.96.0.80',
          port: 443,
          status: [{ hostname: nlb }],
        }),
      ],
      { [nlb]: ['198.51.100.9'] },
    );
    const { returned } = await evidenceIds(view, [{ id: 1, dst: '198.51.100.9', dport: 443 }], 'shop/cart');
    expect(returned).toEqual([1]);
  });

  it("a cloud-written name that answers another Service's ClusterIP still does not claim it", async () => {
    const nlb = 'k8s-shop-cart-0123456789.elb.eu-west-1.amazonaws.com';
    const view = viewOf(
      [
        ...victimDb,
        service('shop', 'cart', {
          type: 'LoadBalancer',
          clusterIP: '10.96.0.80',
          port: 5432,
          status: [{ hostname: nlb }],
        }),
      ],
      { [nlb]: [DB_CLUSTER_IP] },
    );
    const flows: Flow[] = [{ id: 1, dst: DB_CLUSTER_IP, dport: 5432, replySrc: '10.244.1.40', replySport: 5432 }];
    expect((await evidenceIds(view, flows, 'shop/cart')).returned).toEqual([]);
  });
});

describe('evidence ownership: (c) hand-written Endpoints', () => {
  const objects = [
    service('victim', 'db', { clusterIP: '10.96.0.50', port: 5432 }),
    slice('victim', 'db', MANAGED, ['10.244.1.40'], 5432),
    // A selector-less LB Service of the tenant's whose Endpoints (mirrored into a slice) name the victim's database pod.
    service('attacker', 'mirror', {
      type: 'LoadBalancer',
      clusterIP: '10.96.0.68',
      port: 5432,
      status: [{ ip: '203.0.113.90' }],
      selector: false,
    }),
    slice('attacker', 'mirror', MIRRORED, ['10.244.1.40'], 5432),
  ];

  it("Endpoints naming the victim's pod do not claim connections to it", async () => {
    const flows: Flow[] = [
      // A victim pod straight to the database pod, and through the database's ClusterIP.
      { id: 1, dst: '10.244.1.40', dport: 5432 },
      { id: 2, dst: '10.96.0.50', dport: 5432, replySrc: '10.244.1.40', replySport: 5432 },
      // The tenant's own LB VIP and ClusterIP: its own, whoever answers.
      { id: 3, src: '198.51.100.3', dst: '203.0.113.90', dport: 5432, replySrc: '10.244.1.40', replySport: 5432 },
      { id: 4, dst: '10.96.0.68', dport: 5432, replySrc: '10.244.1.40', replySport: 5432 },
    ];
    const { returned, kept } = await evidenceIds(viewOf(objects), flows, 'attacker/mirror');
    expect(kept).toEqual([1, 2, 3, 4]);
    expect(returned).toEqual([3, 4]);
  });

  it('a slice with no managed-by label (written directly) proves nothing either', async () => {
    const direct = [...objects.slice(0, 3), slice('attacker', 'mirror', {}, ['10.244.1.40'], 5432)];
    const { returned } = await evidenceIds(
      viewOf(direct),
      [{ id: 1, dst: '10.244.1.40', dport: 5432 }],
      'attacker/mirror',
    );
    expect(returned).toEqual([]);
  });
});

describe('evidence ownership: (a) a shared Gateway, its address given or resolved', () => {
  const GW_VIP = '203.0.113.90';
  const GW_NAME = 'k8s-shared-gw-0123.elb.eu-west-1.amazonaws.com';
  const shared = (addresses: { type?: string; value: string }[]) => [
    gateway({
      namespace: 'infra',
      name: 'shared',
      className: 'alb',
      listeners: [{ name: 'http', port: 80, protocol: 'HTTP', from: 'All' }],
      addresses,
    }),
    service('victim', 'web', { type: 'NodePort', clusterIP: '10.96.0.10', port: 80, nodePort: 30081 }),
    slice('victim', 'web', MANAGED, ['10.244.1.50'], 80),
    route({
      namespace: 'victim',
      name: 'web',
      parents: [{ name: 'shared', namespace: 'infra' }],
      backends: [{ name: 'web', port: 80 }],
    }),
    // The tenant attaches its own route to the same Gateway: its Service gets the Gateway's address too.
    service('attacker', 'evil', { type: 'NodePort', clusterIP: '10.96.0.66', port: 80, nodePort: 30066 }),
    slice('attacker', 'evil', MANAGED, ['10.244.1.66'], 80),
    route({
      namespace: 'attacker',
      name: 'evil',
      parents: [{ name: 'shared', namespace: 'infra' }],
      backends: [{ name: 'evil', port: 80 }],
    }),
  ];
  const flows: Flow[] = [
    { id: 1, dst: GW_VIP, dport: 80 },
    { id: 3, src: '35.191.0.5', dst: NODE_IP, dport: 30081, replySrc: '10.244.1.50', replySport: 80 },
    { id: 4, src: '35.191.0.6', dst: NODE_IP, dport: 30066, replySrc: '10.244.1.66', replySport: 80 },
  ];

  const cases: [string, { type: string; value: string }[], Record<string, string[]>][] = [
    ['an IPAddress', [{ type: 'IPAddress', value: GW_VIP }], {}],
    ['a Hostname this node resolves', [{ type: 'Hostname', value: GW_NAME }], { [GW_NAME]: [GW_VIP] }],
  ];
  for (const [what, addresses, answers] of cases) {
    it(`${what}: the tenant's route does not get everyone's connections to the Gateway, only its own NodePort leg`, async () => {
      const view = viewOf(shared(addresses), answers);
      const { returned, kept } = await evidenceIds(view, flows, 'attacker/evil');
      // Counted for every Service behind the Gateway, as an Ingress VIP is...
      expect(kept).toEqual([1, 4]);
      // ...but never an evidence leg.
      expect(returned).toEqual([4]);
      expect((await evidenceIds(view, flows, 'victim/web')).returned).toEqual([3]);
    });
  }
});
