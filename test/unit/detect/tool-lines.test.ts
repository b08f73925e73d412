// Evidence lines keep the forms SREs paste from their terminals: `ipvsadm -Ln` names forwarding methods capitalised.
import { describe, expect, it } from 'vitest';
import { formatIpvs } from '../../../src/detect/tool-lines.js';
import { FORWARDS } from '../../../src/kernel/ipvs/uapi.js';
import type { IpvsRealServer, IpvsVirtualServer } from '../../../src/kernel/types.js';

const realServer = (forward: IpvsRealServer['forward']): IpvsRealServer =>
  ({ address: '10.0.0.7', port: 8080, forward, weight: 1, activeConns: 2, inactiveConns: 3 }) as IpvsRealServer;

describe('formatIpvs', () => {
  it('prints each forwarding method as ipvsadm does, and a method without a name as its number', () => {
    const vs = {
      address: '203.0.113.10',
      protocol: 'TCP',
      port: 80,
      scheduler: 'rr',
      flags: [],
      realServers: [...FORWARDS, 9].map(realServer),
    } as unknown as IpvsVirtualServer;
    expect(formatIpvs(vs)).toEqual([
      'IPVS TCP  203.0.113.10:80 rr',
      'IPVS   -> 10.0.0.7:8080  Masq 1 2 3',
      'IPVS   -> 10.0.0.7:8080  Local 1 2 3',
      'IPVS   -> 10.0.0.7:8080  Tunnel 1 2 3',
      'IPVS   -> 10.0.0.7:8080  Route 1 2 3',
      'IPVS   -> 10.0.0.7:8080  Bypass 1 2 3',
      'IPVS   -> 10.0.0.7:8080  9 1 2 3',
    ]);
  });
});
