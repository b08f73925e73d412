import { describe, expect, it } from 'vitest';
import { parseIpsetList, parseIpsetSave } from '../../../src/kernel/nat/ipset.js';
import { fixture } from './fixtures.js';

const SAVE = 'ipvs-1.28.ipset.save';
const LIST = 'ipvs-1.28.ipset-list.txt';

describe('parseIpsetSave', () => {
  it('reads the sets of an IPVS-mode node with type, family, header options and members', () => {
    const d = parseIpsetSave(fixture(SAVE), SAVE);
    expect(d.warnings).toEqual([]);
    expect(d.sets).toHaveLength(17);
    const lb = d.sets.find((s) => s.name === 'KUBE-LOAD-BALANCER-LOCAL')!;
    expect(lb).toMatchObject({
      type: 'hash:ip,port',
      family: 'inet',
      members: [{ entry: '192.0.2.20,tcp:80', options: {} }],
    });
    expect(lb.options).toMatchObject({ hashsize: '1024', maxelem: '65536', bucketsize: '12' });
    expect(lb.options.initval).toMatch(/^0x[0-9a-f]{8}$/);
    const np = d.sets.find((s) => s.name === 'KUBE-NODE-PORT-TCP')!;
    expect(np).toMatchObject({ type: 'bitmap:port', options: { range: '0-65535' } });
    expect(np.family).toBeUndefined();
    expect(np.members.map((m) => m.entry)).toEqual(['30080', '31080']);
    expect(d.sets.find((s) => s.name === 'KUBE-LOOP-BACK')!.members.map((m) => m.entry)).toContain(
      '10.244.1.2,udp:53,10.244.1.2',
    );
  });

  it('reads header flags and per-element options, quoted comments included', () => {
    const d = parseIpsetSave(
      [
        'create c1 hash:ip family inet6 hashsize 1024 maxelem 65536 timeout 0 counters comment bucketsize 12 initval 0x462fd447',
        'add c1 2001:db8::2 timeout 100 packets 3 bytes 180 comment "owner: team a"',
        'add c1 2001:db8::3 nomatch',
      ].join('\n'),
      'sets.txt',
    );
    expect(d.sets[0]).toMatchObject({
      family: 'inet6',
      options: { timeout: '0', counters: '', comment: '', bucketsize: '12' },
      members: [
        { entry: '2001:db8::2', options: { timeout: '100', packets: '3', bytes: '180', comment: 'owner: team a' } },
        { entry: '2001:db8::3', options: { nomatch: '' } },
      ],
    });
  });

  it('warns about elements of unknown sets, duplicate sets and unreadable lines', () => {
    const d = parseIpsetSave(
      'add X 1.2.3.4\ncreate A hash:ip\ncreate A hash:ip\nadd A "1.2.3.4\nflush A\n',
      'sets.txt',
    );
    expect(d.sets.map((s) => s.name)).toEqual(['A', 'A']);
    expect(d.warnings).toEqual([
      "sets.txt:1: element for set 'X' that was not created",
      "sets.txt:3: set 'A' created twice",
      'sets.txt:4: line skipped: unterminated quote starting at column 7',
      "sets.txt:5: unrecognised line 'flush A'",
    ]);
  });

  it('keeps the sets of a truncated save and rejects text that is not ipset output', () => {
    const text = fixture(SAVE);
    const d = parseIpsetSave(text.slice(0, text.indexOf('add KUBE-LOOP-BACK')), SAVE);
    expect(d.sets.find((s) => s.name === 'KUBE-LOOP-BACK')!.members).toEqual([]);
    expect(d.sets.find((s) => s.name === 'KUBE-CLUSTER-IP')!.members).toHaveLength(5);
    expect(() => parseIpsetSave('ipset v7.17: Kernel error received: Operation not permitted\n', 'ipset save')).toThrow(
      /^ipset save:1: no 'create' line found; not 'ipset save' output/,
    );
    expect(parseIpsetSave('', 'ipset save')).toEqual({ source: 'ipset save', sets: [], warnings: [] });
  });
});

describe('parseIpsetList', () => {
  it('gives the same sets and members as ipset save of the same node', () => {
    const fromList = parseIpsetList(fixture(LIST), LIST);
    const fromSave = parseIpsetSave(fixture(SAVE), SAVE);
    expect(fromList.warnings).toEqual([]);
    const shape = (sets: typeof fromSave.sets) =>
      sets.map((s) => ({ name: s.name, type: s.type, family: s.family, options: s.options, members: s.members }));
    expect(shape(fromList.sets)).toEqual(shape(fromSave.sets));
  });

  it('says when a listing ends before all members are printed', () => {
    const text = fixture(LIST);
    const cut = text.slice(0, text.indexOf('10.96.0.10,udp:53'));
    const d = parseIpsetList(cut, LIST);
    const last = d.sets[d.sets.length - 1]!;
    expect(last.name).toBe('KUBE-CLUSTER-IP');
    expect(last.members.map((m) => m.entry)).toEqual(['10.96.0.1,tcp:443', '10.96.0.10,tcp:53']);
    expect(d.warnings).toHaveLength(1);
    expect(d.warnings[0]).toMatch(
      /^ipvs-1\.28\.ipset-list\.txt:\d+: set 'KUBE-CLUSTER-IP' lists 2 of 5 entries: truncated\?$/,
    );
  });

  it('warns about sets without Type or Members, and rejects text that does not start with Name:', () => {
    const d = parseIpsetList('Name: A\nHeader: family inet\nName: B\nType: hash:ip\nMembers:\n1.1.1.1\n', 'l.txt');
    expect(d.sets.map((s) => [s.name, s.type, s.members.length])).toEqual([
      ['A', '', 0],
      ['B', 'hash:ip', 1],
    ]);
    expect(d.warnings).toEqual(["l.txt:1: set 'A' has no 'Members:' line", "l.txt:1: set 'A' has no 'Type:' line"]);
    expect(() => parseIpsetList('Members:\n1.1.1.1\n', 'l.txt')).toThrow(
      "l.txt:1: expected 'Name: SET' first; not 'ipset list' output",
    );
  });
});
