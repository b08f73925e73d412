// Loading the IPVS fixtures recorded by test/vm/ipvs.test.ts.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { decodeDest, decodeService } from '../../../src/kernel/ipvs/decode.js';
import { splitMessages } from '../../../src/kernel/netlink/codec.js';
import type { IpvsSnapshot } from '../../../src/kernel/types.js';
import { IPVSADM_VIEWS } from './same-table.js';

const DIR = fileURLToPath(new URL('../../fixtures/ipvs/', import.meta.url));

export interface RecordedReply {
  kind: 'service' | 'dest';
  serviceIndex: number;
  message: Buffer;
}

export function recordedReplies(): RecordedReply[] {
  return readFileSync(`${DIR}genl-replies.txt`, 'utf8')
    .split('\n')
    .filter((l) => l && !l.startsWith('#'))
    .map((l) => {
      const [kind, index, hex] = l.split(' ');
      return { kind: kind as RecordedReply['kind'], serviceIndex: Number(index), message: Buffer.from(hex!, 'hex') };
    });
}

/** The snapshot the reader assembles, rebuilt from recorded messages with the same decoders. */
export function decodeRecorded(replies: RecordedReply[]): IpvsSnapshot {
  const snap: IpvsSnapshot = { virtualServers: [] };
  for (const r of replies) {
    const [m] = splitMessages(r.message);
    if (r.kind === 'service') snap.virtualServers[r.serviceIndex] = decodeService(m!.payload).service;
    else {
      const vs = snap.virtualServers[r.serviceIndex]!;
      vs.realServers.push(decodeDest(m!.payload, vs.family));
    }
  }
  return snap;
}

export function ipvsadmViews(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const v of [...IPVSADM_VIEWS, 'rate-before', 'rate-after'])
    out[v] = readFileSync(`${DIR}ipvsadm-${v}.txt`, 'utf8');
  return out;
}
