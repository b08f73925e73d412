// The counters the ours rule for packets (capture/classify.ts) says a plan of sends bumps: the
// oracle that the scenarios' expected counts, and so the eBPF program's counts, are checked against.
import { classify, TargetIndex } from '../../src/capture/classify.js';
import {
  address16,
  type Direction,
  formatAddress16,
  PROTO_NAMES,
  PROTO_NUMBERS,
  type Targets,
} from '../../src/capture/targets.js';
import type { Expected } from './capture-lab.js';
import type { Send } from './capture-sender.js';

/** What each plan of sends, going out (egress) or coming in (ingress) on the uplink, must count, without bytes. */
export function oracleCounters(targets: Targets, sends: [Direction, Send[]][]): Omit<Expected, 'bytes'>[] {
  const index = new TargetIndex(targets);
  const out = new Map<string, Omit<Expected, 'bytes'>>();
  for (const [direction, plan] of sends) {
    for (const s of plan) {
      const dst = address16(s.dst);
      const headers = {
        src: address16(s.src),
        dst,
        v4: !s.dst.includes(':'),
        proto: PROTO_NUMBERS[s.proto],
        sport: 40000,
        dport: s.port,
      };
      for (const c of classify(headers, direction, index)) {
        const counter = {
          target: formatAddress16(c.target),
          port: c.port,
          proto: PROTO_NAMES.get(c.proto) as Expected['proto'],
          kind: c.kind,
        };
        const key = `${counter.kind} ${counter.target} ${counter.port}/${counter.proto}`;
        const had = out.get(key);
        if (had) had.packets += s.count;
        else out.set(key, { ...counter, packets: s.count });
      }
    }
  }
  return [...out.values()];
}

/** The expectations without their bytes, in a stable order, to compare with oracleCounters. */
export const sortedCounts = (want: Omit<Expected, 'bytes'>[]): Omit<Expected, 'bytes'>[] =>
  want
    .map(({ target, port, proto, kind, packets }) => ({ target, port, proto, kind, packets }))
    .sort((a, b) => `${a.kind} ${a.target} ${a.port}`.localeCompare(`${b.kind} ${b.target} ${b.port}`));
