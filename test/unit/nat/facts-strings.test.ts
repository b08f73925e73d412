// What the NAT facts keep of the rules once the read is over (own-text.ts): the agent holds the
// facts of every LB Service, so a rule line kept alive by a substring, or the same evidence line
// held once per fact, costs memory per Service. Strings have no identity in JS; a heap snapshot
// of this process shows which strings exist.
import { getHeapSnapshot } from 'node:v8';
import { describe, expect, it } from 'vitest';
import { syntheticCluster } from '../../../bench/agent-cluster.js';
import { kubeProxyIpvsRules } from '../../../bench/kube-proxy-ipvs-rules.js';
import { kubeProxyRules } from '../../../bench/kube-proxy-rules.js';
import { parseIpsetSave } from '../../../src/kernel/nat/ipset.js';
import { NatRules } from '../../../src/kernel/nat/nat-rules.js';
import {
  FILTER_DROP_CHAINS,
  type KubeNatFacts,
  natRulesFacts,
  nodePortEvidence,
} from '../../../src/kubeproxy/facts.js';

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[]]; edge_fields: string[]; edge_types: [string[]] } };
  nodes: number[];
  edges: number[];
  strings: string[];
}

async function snapshot(): Promise<Snapshot> {
  const chunks: Buffer[] = [];
  for await (const c of getHeapSnapshot()) chunks.push(c as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8')) as Snapshot;
}

/** The values of the string nodes (flat strings, not slices or cons strings) in this process's heap. */
async function heapStrings(): Promise<string[]> {
  const s = await snapshot();
  const fields = s.snapshot.meta.node_fields;
  const types = s.snapshot.meta.node_types[0];
  const [iType, iName, n] = [fields.indexOf('type'), fields.indexOf('name'), fields.length];
  const out: string[] = [];
  for (let i = 0; i < s.nodes.length; i += n)
    if (types[s.nodes[i + iType]!] === 'string') out.push(s.strings[s.nodes[i + iName]!]!);
  return out;
}

/**
 * Facts read from rule lines the test never makes as strings (the read decodes them from bytes). The read
 * runs in this frame, not the test's: a live frame's stale registers would keep the read's tables alive.
 */
function readMarkedFacts(): KubeNatFacts {
  const text = kubeProxyRules(syntheticCluster(60, 240).list.items).text.replaceAll('team-', 'tEaM-');
  const rules = new NatRules(Buffer.from(text), {
    source: 'iptables-save',
    family: 4,
    filterChains: FILTER_DROP_CHAINS,
  });
  return natRulesFacts([rules], []);
}

describe("the NAT facts' strings after a read", () => {
  it('keep no rule line through a substring, and each evidence line once', async () => {
    let facts: KubeNatFacts | undefined = readMarkedFacts();
    expect(facts.loadBalancers.length).toBeGreaterThan(60);
    const prerouting = facts.loadBalancers[0]!.evidence.find((l) => l.includes(' -A PREROUTING '))!;
    expect(facts.loadBalancers.filter((f) => f.evidence.includes(prerouting)).length).toBe(facts.loadBalancers.length);
    const all = await heapStrings();
    const strings = all.filter((v) => v.includes('tEaM-'));
    // A whole save-output line (no 'iptables-save:N: ' prefix) alive: a fact's string is a slice of it.
    // One stays as the subject of V8's last regexp match, and on a loaded box sometimes one more (holder not known).
    const lines = strings.filter((v) => v.startsWith('-A '));
    expect(lines.length).toBeLessThanOrEqual(2);
    // The pod selectors' CIDR is read from kube-proxy's masquerade rules ('! -s podCIDR ... KUBE-MARK-MASQ').
    expect(lines.filter((v) => v.includes(' ! -s ') && v.includes('KUBE-MARK-MASQ'))).toEqual([]);
    expect(all.filter((v) => v === prerouting).length).toBe(1);
    facts = undefined;
  }, 60_000);

  it("hold each NodePort fact's evidence in an array of its size (no room for 17 lines)", async () => {
    let bytes: Buffer | undefined = Buffer.from(kubeProxyRules(syntheticCluster(60, 240).list.items).text);
    let facts: KubeNatFacts | undefined = natRulesFacts(
      [new NatRules(bytes, { source: 'iptables-save', family: 4, filterChains: FILTER_DROP_CHAINS })],
      [],
    );
    bytes = undefined;
    const most = Math.max(...facts.nodePorts.map((f) => f.shownBy.length));
    expect(facts.nodePorts.length).toBeGreaterThan(60);
    const s = await snapshot();
    const { node_fields: nf, edge_fields: ef, node_types: nt, edge_types: et } = s.snapshot.meta;
    const [iName, iSize, iEdges, nN] = [
      nf.indexOf('name'),
      nf.indexOf('self_size'),
      nf.indexOf('edge_count'),
      nf.length,
    ];
    const [eType, eName, eTo, nE] = [ef.indexOf('type'), ef.indexOf('name_or_index'), ef.indexOf('to_node'), ef.length];
    const edgeTypes = et[0];
    const firstEdge: number[] = [];
    for (let i = 0, e = 0; i < s.nodes.length; i += nN) {
      firstEdge.push(e);
      e += s.nodes[i + iEdges]! * nE;
    }
    const edges = (node: number): { type: string; name: string; to: number }[] => {
      const out = [];
      for (let k = 0, e = firstEdge[node / nN]!; k < s.nodes[node + iEdges]!; k++, e += nE) {
        const type = edgeTypes[s.edges[e + eType]!]!;
        out.push({
          type,
          name: type === 'element' || type === 'hidden' ? '' : s.strings[s.edges[e + eName]!]!,
          to: s.edges[e + eTo]!,
        });
      }
      return out;
    };
    // NodePort facts: objects with 'protocol' and 'shownBy' and no 'vip' (numbers are no edges); their evidence's store.
    const stores: number[] = [];
    for (let i = 0; i < s.nodes.length; i += nN) {
      if (nt[0][s.nodes[i]!] !== 'object' || s.strings[s.nodes[i + iName]!] !== 'Object') continue;
      const es = edges(i);
      const ev = es.find((e) => e.type === 'property' && e.name === 'shownBy');
      if (!ev || !es.some((e) => e.name === 'protocol') || es.some((e) => e.name === 'vip')) continue;
      const store = edges(ev.to).find((e) => e.type === 'internal' && e.name === 'elements');
      if (store) stores.push(s.nodes[store.to + iSize]!);
    }
    expect(stores.length).toBeGreaterThanOrEqual(facts.nodePorts.length);
    // A header (16 bytes) and one pointer (8 bytes at most) per line.
    expect(Math.max(...stores)).toBeLessThanOrEqual(16 + 8 * most);
    facts = undefined;
  }, 60_000);

  it('IPVS mode: hold no evidence line per NodePort, one array per kind of port shared by its facts', async () => {
    const rules = kubeProxyIpvsRules(syntheticCluster(60, 240).list.items);
    let bytes: Buffer | undefined = Buffer.from(rules.iptables);
    let sets: ReturnType<typeof parseIpsetSave> | undefined = parseIpsetSave(Buffer.from(rules.ipset), 'ipset save');
    let facts: KubeNatFacts | undefined = natRulesFacts(
      [new NatRules(bytes, { source: 'iptables-save', family: 4, filterChains: FILTER_DROP_CHAINS })],
      sets.sets,
    );
    bytes = undefined;
    sets = undefined;
    expect(facts.nodePorts.length).toBeGreaterThan(60);
    expect(
      facts.nodePorts.some((f) => f.trafficPolicy === 'Local') &&
        facts.nodePorts.some((f) => f.trafficPolicy === 'Cluster'),
    ).toBe(true);
    // KUBE-NODE-PORT's TCP rules: local and masquerade (Local ports), masquerade alone (Cluster ports).
    expect(new Set(facts.nodePorts.map((f) => f.shownBy)).size).toBeLessThanOrEqual(4);
    const line = /^ipset KUBE-NODE-PORT-(LOCAL-)?(TCP|UDP) member \d+ \(iptables-save:\d+: -A KUBE-NODE-PORT /;
    expect((await heapStrings()).filter((v) => line.test(v)).length).toBe(0);
    // The text is made when asked (after the snapshot: V8 keeps a regexp's last subject alive).
    expect(nodePortEvidence(facts.nodePorts[0]!).every((l) => line.test(l))).toBe(true);
    facts = undefined;
  }, 60_000);
});
