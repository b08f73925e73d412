import { describe, expect, it } from 'vitest';
import { NatParseError } from '../../../src/kernel/nat/errors.js';
import { parseIptablesSave } from '../../../src/kernel/nat/iptables-save.js';
import { fixture, parseFixture } from './fixtures.js';

const OLD = 'iptables-1.21-legacy.v4.save';
const NEW = 'iptables-1.29-nft.v4.save';
const parse = (text: string) => parseIptablesSave(text, { source: 'test.save', family: 4 });

describe('parseIptablesSave on captured kube-proxy nodes', () => {
  it('reads every table, chain and rule of a 1.21 legacy capture', () => {
    const d = parseFixture(OLD);
    expect(d.warnings).toEqual([]);
    expect(d.tables.map((t) => [t.name, t.chains.length, t.rules.length, t.committed])).toEqual([
      ['nat', 25, 57, true],
      ['filter', 11, 18, true],
      ['mangle', 7, 0, true],
    ]);
    const nat = d.tables[0]!;
    expect(nat.chains[0]).toEqual({
      name: 'PREROUTING',
      builtin: true,
      policy: 'ACCEPT',
      counters: { packets: 0, bytes: 0 },
      line: 3,
    });
    expect(nat.chains.find((c) => c.name === 'KUBE-XLB-RUKNB3TURLFC6SGL')).toMatchObject({ builtin: false });
    expect(nat.chains.find((c) => c.name === 'KUBE-XLB-RUKNB3TURLFC6SGL')!.policy).toBeUndefined();
  });

  it('keeps only the tables asked for: the same nat table, the others empty', () => {
    const all = parseFixture(OLD);
    const natOnly = parseIptablesSave(fixture(OLD), {
      source: 'iptables-1.21-legacy.v4.save',
      family: 4,
      tables: new Set(['nat']),
    });
    expect(natOnly.warnings).toEqual([]);
    expect(natOnly.tables.map((t) => [t.name, t.chains.length, t.rules.length, t.committed])).toEqual([
      ['nat', 25, 57, true],
      ['filter', 0, 0, true],
      ['mangle', 0, 0, true],
    ]);
    expect(natOnly.tables[0]).toEqual(all.tables[0]);
  });

  it('keeps the spec as written, the target, the comment, the matches and the line', () => {
    const nat = parseFixture(OLD).tables[0]!;
    const lb = nat.rules.find((r) => r.line === 70)!;
    expect(lb).toMatchObject({
      table: 'nat',
      chain: 'KUBE-SERVICES',
      spec: '-d 192.0.2.10/32 -p tcp -m comment --comment "shop/web:http loadbalancer IP" -m tcp --dport 80 -j KUBE-FW-67NZLRHBNDSAWJRO',
      target: 'KUBE-FW-67NZLRHBNDSAWJRO',
      goto: false,
      targetArgs: [],
      comment: 'shop/web:http loadbalancer IP',
    });
    expect(lb.matches).toEqual([
      {
        module: '',
        options: [
          { name: '-d', negated: false, values: ['192.0.2.10/32'] },
          { name: '-p', negated: false, values: ['tcp'] },
        ],
      },
      {
        module: 'comment',
        options: [{ name: '--comment', negated: false, values: ['shop/web:http loadbalancer IP'] }],
      },
      { module: 'tcp', options: [{ name: '--dport', negated: false, values: ['80'] }] },
    ]);
    const dnat = nat.rules.find((r) => r.chain === 'KUBE-SEP-34ZZ2QFGO32YYXXO' && r.target === 'DNAT')!;
    expect(dnat.targetArgs).toEqual(['--to-destination', '10.244.1.5:8080']);
    const masqAll = nat.rules.find((r) => r.spec.startsWith('! -s 10.244.0.0/16 -d 10.96.0.1/32'))!;
    expect(masqAll.matches[0]!.options[0]).toEqual({ name: '-s', negated: true, values: ['10.244.0.0/16'] });
    const conn = parseFixture(OLD).tables[1]!.rules.find((r) => r.comment === 'block incoming localnet connections')!;
    expect(conn.matches.find((m) => m.module === 'conntrack')!.options).toEqual([
      { name: '--ctstate', negated: true, values: ['RELATED,ESTABLISHED,DNAT'] },
    ]);
  });

  it('reads rules that have no target (1.29 KUBE-FW "other traffic" comment rule) and IPv6 captures', () => {
    const nat = parseFixture(NEW).tables.find((t) => t.name === 'nat')!;
    const other = nat.rules.find((r) => r.comment?.startsWith('other traffic to shop/admin'))!;
    expect(other.target).toBeUndefined();
    const v6 = parseFixture('iptables-1.29-nft.v6.save', 6);
    expect(v6.family).toBe(6);
    expect(v6.warnings).toEqual([]);
    const dnat = v6.tables.find((t) => t.name === 'nat')!.rules.find((r) => r.target === 'DNAT')!;
    expect(dnat.targetArgs).toEqual(['--to-destination', '[fd00:10:244:1::6]:8080']);
  });
});

describe('parseIptablesSave on odd and broken input', () => {
  it('unescapes quoted comments and keeps unknown match modules with their options', () => {
    const d = parse(
      [
        '*nat',
        ':KUBE-X - [0:0]',
        '-A KUBE-X -m comment --comment "say \\"hi\\" to C:\\\\temp" -m frobnicate --level 3 4 ! --mode fast -g KUBE-Y',
        'COMMIT',
      ].join('\n'),
    );
    const r = d.tables[0]!.rules[0]!;
    expect(r.comment).toBe('say "hi" to C:\\temp');
    expect(r.matches[1]).toEqual({
      module: 'frobnicate',
      options: [
        { name: '--level', negated: false, values: ['3', '4'] },
        { name: '--mode', negated: true, values: ['fast'] },
      ],
    });
    expect(r).toMatchObject({ target: 'KUBE-Y', goto: true });
    expect(d.warnings).toEqual([]);
  });

  it('reads per-rule counters (iptables-save -c)', () => {
    const d = parse('*nat\n:PREROUTING ACCEPT [12:720]\n[5:300] -A PREROUTING -j KUBE-SERVICES\nCOMMIT\n');
    expect(d.tables[0]!.rules[0]).toMatchObject({
      counters: { packets: 5, bytes: 300 },
      spec: '-j KUBE-SERVICES',
      chain: 'PREROUTING',
    });
    expect(d.tables[0]!.chains[0]!.counters).toEqual({ packets: 12, bytes: 720 });
  });

  it('keeps what a truncated capture holds and says where it stops', () => {
    const lines = fixture(OLD).split('\n');
    const cut = lines.slice(0, 60).join('\n'); // inside the nat table, before its COMMIT
    const d = parse(cut);
    expect(d.tables).toHaveLength(1);
    expect(d.tables[0]!.committed).toBe(false);
    expect(d.tables[0]!.rules.length).toBe(cut.split('\n').filter((l) => l.startsWith('-A ')).length);
    expect(d.warnings).toEqual(["test.save:60: input ends inside table 'nat' (no COMMIT): truncated capture?"]);
  });

  it('skips a rule cut in the middle of a quoted comment, with a warning naming the line', () => {
    const lines = fixture(OLD).split('\n');
    const at = lines.findIndex((l) => l.includes('"shop/web:http loadbalancer IP"'));
    const broken = [
      ...lines.slice(0, at),
      lines[at]!.slice(0, lines[at]!.indexOf('loadbalancer')),
      ...lines.slice(at + 1),
    ].join('\n');
    const d = parse(broken);
    const column = lines[at]!.indexOf('"') + 1;
    expect(d.warnings).toEqual([`test.save:${at + 1}: rule skipped: unterminated quote starting at column ${column}`]);
    expect(d.tables[0]!.rules.length).toBe(parseFixture(OLD).tables[0]!.rules.length - 1);
  });

  it('warns about a missing COMMIT between tables and about lines it does not know', () => {
    const d = parse('*nat\n:A - [0:0]\n*filter\n:B - [0:0]\nhello there\nCOMMIT\n');
    expect(d.tables.map((t) => [t.name, t.committed])).toEqual([
      ['nat', false],
      ['filter', true],
    ]);
    expect(d.warnings).toEqual([
      "test.save:3: table 'nat' has no COMMIT before '*filter'",
      "test.save:5: unrecognised line 'hello there'",
    ]);
  });

  it('turns rule words it cannot read into warnings, not exceptions', () => {
    const d = parse(
      '*nat\n:A - [0:0]\n-A A -m\n-A A -j\n-A A stray\n-A\n-I A -j X\n-A A !\n-A NOPE -j ACCEPT\nCOMMIT\n',
    );
    expect(d.tables[0]!.rules.map((r) => [r.chain, r.target])).toEqual([['NOPE', 'ACCEPT']]);
    expect(d.warnings).toEqual([
      "test.save:3: rule skipped: '-m' without a module name",
      "test.save:4: rule skipped: '-j' without a target",
      "test.save:5: rule skipped: unexpected word 'stray'",
      "test.save:6: rule skipped: expected '-A CHAIN ...', got '-A'",
      "test.save:7: rule skipped: expected '-A CHAIN ...', got '-I A -j X'",
      "test.save:8: rule skipped: '!' at the end of the rule",
      "test.save:9: rule for undeclared chain 'NOPE'",
    ]);
  });

  it('rejects a rule or chain before any table header with an error naming input and line', () => {
    expect(() => parse('# Generated by iptables-save\n-A KUBE-SERVICES -j ACCEPT\n')).toThrow(
      new NatParseError('test.save', 2, 'rule before any table header (*nat, *filter, ...)'),
    );
    expect(() => parse('\n:KUBE-SERVICES - [0:0]\n')).toThrow('test.save:2: chain declared before any table header');
  });

  it('rejects input that is not iptables-save output at all', () => {
    expect(() => parse('<html><body>502 Bad Gateway</body></html>\n')).toThrow(
      /^test\.save:1: no table found; not iptables-save output/,
    );
    expect(() => parse('*NAT TABLE\n')).toThrow("test.save:1: bad table header '*NAT TABLE'");
  });

  it('gives an empty dump for empty output (no table loaded) and for comment-only output', () => {
    expect(parse('')).toEqual({ family: 4, source: 'test.save', tables: [], warnings: [] });
    expect(parse('# Warning: iptables-legacy tables present, use iptables-legacy-save to see them\n').tables).toEqual(
      [],
    );
  });

  it('reports tables iptables-nft-save says it cannot show', () => {
    const d = parse("# Table `nat' is incompatible, use 'nft' tool.\n");
    expect(d.warnings).toEqual(["test.save:1: Table `nat' is incompatible, use 'nft' tool."]);
  });
});
