// The agent's Service index at start: built once, from the cluster view and the node's addresses
// together (each build also rebuilds the conntrack prefilter, the kept entries' index and the
// counters' targets), and again for every change after the start.
import { resolve } from 'node:path';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { ServiceIndex } from '../../../src/agent/service-index.js';
import { AgentSources, type PolledSource } from '../../../src/agent/sources.js';
import type { AddressSnapshot } from '../../../src/kernel/types.js';
import { addresses } from '../../../src/source/addresses.js';

const CLUSTER = resolve(import.meta.dirname, '../../fixtures/cluster/kubectl-list.json');

const node = (ip: string): AddressSnapshot => ({
  interfaces: [
    {
      index: 2,
      name: 'eth0',
      up: true,
      mtu: 1500,
      addresses: [{ family: 4, address: ip, prefixLen: 24, scope: 'global' }],
    },
  ] as AddressSnapshot['interfaces'],
});

function sources(ips: string[]) {
  const built: ServiceIndex[] = [];
  let reads = 0;
  const reader: PolledSource = {
    def: addresses as PolledSource['def'],
    reader: {
      name: 'addresses',
      key: 'addresses',
      read: () => ({ state: 'up', value: node(ips[Math.min(reads++, ips.length - 1)]!) }),
    },
  };
  const s = new AgentSources({
    nodeName: 'node-1',
    log: pino({ level: 'silent' }),
    clusterFile: CLUSTER,
    clusterApi: false,
    readers: () => [reader],
    onChange: () => {},
    onIndex: (i) => built.push(i),
    onWatchedRead: () => {},
  });
  return { s, built };
}

describe('AgentSources index at start', () => {
  it('builds the index once, from the view and the addresses read together', async () => {
    const { s, built } = sources(['10.0.0.5']);
    await s.start();
    expect(built).toHaveLength(1);
    expect(built[0]!.services.length).toBeGreaterThan(0);
    expect(built[0]!.ours().nodeIps).toContain('10.0.0.5');
    expect(s.index).toBe(built[0]);
    await s.stop();
  });

  it('runs afterReads after the reads and before the one build', async () => {
    const { s, built } = sources(['10.0.0.5']);
    const seen: number[] = [];
    await s.start(() => seen.push(built.length));
    expect(seen).toEqual([0]);
    expect(built).toHaveLength(1);
    expect(built[0]!.ours().nodeIps).toContain('10.0.0.5');
    await s.stop();
  });

  it('rebuilds at once for a change after the start', async () => {
    const { s, built } = sources(['10.0.0.5', '10.0.0.6']);
    await s.start();
    await s.resync(); // the cluster file is unchanged; the addresses are new
    expect(built).toHaveLength(2);
    expect(built[1]!.ours().nodeIps).toContain('10.0.0.6');
    expect(built[1]!.ours().nodeIps).not.toContain('10.0.0.5');
    await s.stop();
  });
});
