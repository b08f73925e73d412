// dumpAddresses over recorded rtnetlink replies (test/fixtures/netlink): an interface created between the link and
// the address dump, or a dump the kernel marks NLM_F_DUMP_INTR, makes it take both dumps again, so a bound LB IP
// is not lost; when the tables keep changing it says so rather than returning a silently short list.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { dumpAddresses, type RouteDumper } from '../../../src/kernel/addresses.js';
import { type NetlinkMessage, NLMSG_DONE, splitMessages } from '../../../src/kernel/netlink/codec.js';

const dir = join(import.meta.dirname, '../../fixtures/netlink');
const messages = (name: string): NetlinkMessage[] =>
  readFileSync(join(dir, name), 'utf8')
    .split('\n')
    .filter(Boolean)
    .flatMap((h) => splitMessages(Buffer.from(h, 'hex')))
    .filter((m) => m.type !== NLMSG_DONE);

const LINKS = messages('rtm-getlink.hex');
const ADDRS = messages('rtm-getaddr.hex');
const RTM_GETLINK = 18;
/** kube-ipvs0's link message: the interface kube-proxy creates when it switches to IPVS mode. */
const KUBE_IPVS = LINKS.find((m) => m.payload.includes(Buffer.from('kube-ipvs0\0')))!;

interface Round {
  links: NetlinkMessage[];
  addrsInterrupted?: boolean;
}

/** Replays one round per link+address dump pair (the last round repeats); counts the dumps asked for. */
function replay(rounds: Round[]): RouteDumper & { dumps: number } {
  let round = 0;
  const r = {
    dumps: 0,
    async dump(msg: Buffer, _what: string, onBatch: (msgs: NetlinkMessage[]) => void | Promise<void>) {
      r.dumps++;
      const now = rounds[Math.min(round, rounds.length - 1)]!;
      if (msg.readUInt16LE(4) === RTM_GETLINK) {
        await onBatch(now.links);
        return { messages: now.links.length, interrupted: false };
      }
      round++;
      await onBatch(ADDRS);
      return { messages: ADDRS.length, interrupted: now.addrsInterrupted ?? false };
    },
  };
  return r;
}

const boundOnKubeIpvs = (d: Awaited<ReturnType<typeof dumpAddresses>>): string[] =>
  d.interfaces.find((i) => i.isKubeIpvs)?.addresses.map((a) => a.address) ?? [];

describe('dumpAddresses when the tables change between or during the dumps', () => {
  const withoutKubeIpvs = LINKS.filter((m) => m !== KUBE_IPVS);
  const complete = async () => dumpAddresses(replay([{ links: LINKS }]));

  it('the recorded dumps agree: one pair of dumps, kube-ipvs0 with its address', async () => {
    const dumper = replay([{ links: LINKS }]);
    const d = await dumpAddresses(dumper);
    expect(dumper.dumps).toBe(2);
    expect(d.inconsistent).toBeUndefined();
    expect(boundOnKubeIpvs(d)).toEqual(['10.0.0.100', '2001:db8:100::100']);
  });

  it('an interface created between the link and the address dump: dumps again and keeps its addresses', async () => {
    const dumper = replay([{ links: withoutKubeIpvs }, { links: LINKS }]);
    const d = await dumpAddresses(dumper);
    expect(dumper.dumps).toBe(4);
    expect(d).toEqual(await complete());
    expect(boundOnKubeIpvs(d)).toEqual(['10.0.0.100', '2001:db8:100::100']);
  });

  it('a dump marked NLM_F_DUMP_INTR is taken again', async () => {
    const dumper = replay([{ links: LINKS, addrsInterrupted: true }, { links: LINKS }]);
    expect(await dumpAddresses(dumper)).toEqual(await complete());
    expect(dumper.dumps).toBe(4);
  });

  it('tables that keep changing: three attempts, then what was read and why it may be short', async () => {
    const dumper = replay([{ links: withoutKubeIpvs }]);
    const d = await dumpAddresses(dumper);
    expect(dumper.dumps).toBe(6);
    expect(d.inconsistent).toBe(
      `addresses of interfaces not in the link dump (index ${KUBE_IPVS.payload.readInt32LE(4)}) (3 attempts); ` +
        'addresses may be missing',
    );
    expect(d.interfaces.length).toBe(LINKS.length - 1);
    const interrupted = await dumpAddresses(replay([{ links: LINKS, addrsInterrupted: true }]));
    expect(interrupted.inconsistent).toBe(
      'the link or address table changed during the dump (NLM_F_DUMP_INTR) (3 attempts); addresses may be missing',
    );
  });
});
