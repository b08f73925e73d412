// ipvsadm text parsers on the outputs recorded in the VM, plus damaged and
// hand-varied inputs (non-exact numbers, CRLF, empty tables, errors).
import { describe, expect, it } from 'vitest';
import {
  IpvsadmParseError,
  parseIpvsadm,
  parseIpvsadmList,
  parseIpvsadmSave,
} from '../../../src/kernel/ipvs/ipvsadm-text.js';
import { ipvsadmViews } from './fixtures.js';

const views = ipvsadmViews();

function errorOf(fn: () => unknown): IpvsadmParseError {
  try {
    fn();
  } catch (e) {
    if (e instanceof IpvsadmParseError) return e;
    throw e;
  }
  throw new Error('parsed without error');
}

describe('ipvsadm text', () => {
  it('says what each view lacks', () => {
    expect(parseIpvsadmList(views.list!).missing).toEqual([
      'persistentConns',
      'thresholds',
      'tunnel',
      'stats',
      'rates',
    ]);
    expect(parseIpvsadmList(views.stats!).missing).toEqual([
      'config',
      'forward',
      'weight',
      'conns',
      'persistentConns',
      'thresholds',
      'tunnel',
      'rates',
    ]);
    expect(parseIpvsadmList(views.thresholds!).missing).toEqual([
      'forward',
      'weight',
      'persistentConns',
      'tunnel',
      'stats',
      'rates',
    ]);
    expect(parseIpvsadmSave(views.save!).missing).toEqual(['conns', 'persistentConns', 'thresholds', 'stats', 'rates']);
  });

  it('reads services and real servers from -Ln', () => {
    const vss = parseIpvsadmList(views.list!).virtualServers;
    expect(vss).toHaveLength(8);
    expect(vss[0]).toMatchObject({
      protocol: 'TCP',
      address: '192.0.2.10',
      port: 443,
      scheduler: 'wrr',
      flags: ['persistent'],
      timeoutS: 600,
      netmask: '255.255.255.0',
    });
    expect(vss.find((v) => v.fwmark === 43)).toMatchObject({ family: 6, protocol: 0, netmask: '128' });
    expect(vss.find((v) => v.port === 53)!.flags).toEqual(['sh-fallback', 'sh-port']);
  });

  it('merges the stats of --stats with the config of ipvsadm-save', () => {
    const s = parseIpvsadm([
      { source: 'save', text: views.save! },
      { source: 'stats', text: views.stats! },
    ]);
    expect(s.missing).toEqual(['conns', 'persistentConns', 'thresholds', 'rates']);
    const vs = s.virtualServers.find((v) => v.address === '10.96.0.10' && v.port === 80)!;
    expect(vs.scheduler).toBe('rr');
    expect(vs.stats).toMatchObject({ conns: 4, inPkts: 20, cps: 0 });
  });

  it('accepts rounded numbers (no --exact), CRLF line ends and an empty table', () => {
    const text = [
      'IP Virtual Server version 1.2.1 (size=4096)',
      'Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes',
      '  -> RemoteAddress:Port',
      'TCP  10.0.0.1:80                       12     345K      67M    8901G       2T',
      '  -> 10.1.0.1:8080                     12     345K      67M    8901G       2T',
    ].join('\r\n');
    const [vs] = parseIpvsadmList(text).virtualServers;
    expect(vs!.stats).toMatchObject({ conns: 12, inPkts: 345e3, outPkts: 67e6, inBytes: 8901e9, outBytes: 2e12 });
    expect(vs!.realServers[0]!.stats!.inBytes).toBe(8901e9);
    expect(parseIpvsadmList(views.list!.split('\n').slice(0, 3).join('\n')).virtualServers).toEqual([]);
    expect(parseIpvsadmSave('').virtualServers).toEqual([]);
  });

  it('names the file and line of bad input', () => {
    const lines = views.stats!.split('\n');
    const cut = [...lines.slice(0, 4), lines[4]!.slice(0, 30), ...lines.slice(5)].join('\n');
    expect(errorOf(() => parseIpvsadmList(cut, 'stats.txt')).message).toBe(
      'stats.txt:5: expected 5 columns after the address, got 0',
    );

    const named = views.list!.replace('10.244.1.2:8443', 'web-1.example:https');
    expect(errorOf(() => parseIpvsadmList(named, 'list.txt')).message).toMatch(
      /^list\.txt:5: expected a numeric address:port, got "web-1\.example:https" \(use ipvsadm -n\)$/,
    );

    expect(errorOf(() => parseIpvsadmList(views.list!.replace('Masq    3', 'Magic   3'), 'l')).message).toBe(
      'l:5: unknown forwarding method "Magic"',
    );
    expect(errorOf(() => parseIpvsadmList(views.list!.slice(60), 'l')).message).toMatch(
      /^l:1: expected the "IP Virtual Server/,
    );
    expect(
      errorOf(() => parseIpvsadmList(views.list!.replace('wrr persistent 600', 'wrr persistent soon'), 'l')).message,
    ).toBe('l:4: persistent timeout: expected a number, got "soon"');

    const save = views.save!.split('\n');
    expect(errorOf(() => parseIpvsadmSave(save.slice(1).join('\n'), 'save.txt')).message).toBe(
      'save.txt:1: real server for -t 192.0.2.10:443 before its -A line',
    );
    expect(
      errorOf(() => parseIpvsadmSave(`${views.save}-a -t 10.96.0.10:80 -r 10.0.0.9:80 -m -q 1\n`, 's')).message,
    ).toMatch(/^s:\d+: unexpected option\(s\) on an -a line: -q$/);
    expect(errorOf(() => parseIpvsadmSave('-A -t 10.0.0.1:80 -s', 's')).message).toBe('s:1: -s without a value');
    expect(errorOf(() => parseIpvsadmSave('-L -n', 's')).message).toBe('s:1: expected -A or -a, got "-L"');
  });

  it('reads the long options ipvsadm takes as their short spelling, and quotes them as written', () => {
    const long = views
      .save!.replaceAll('-A -t', '-A --tcp-service')
      .replaceAll(' -s ', ' --scheduler ')
      .replaceAll(' -r ', ' --real-server ')
      .replaceAll(' -m', ' --masquerading');
    expect(long).not.toBe(views.save);
    expect(parseIpvsadmSave(long)).toEqual(parseIpvsadmSave(views.save!));

    const fail = (text: string) => errorOf(() => parseIpvsadmSave(text, 's')).message;
    expect(fail('-A -t 10.0.0.1:80 --scheduler')).toBe('s:1: --scheduler without a value');
    expect(fail('-A --tcp-service 10.0.0.1:80 --scheduler rr --weight 2')).toBe(
      's:1: unexpected option(s) on an -A line: --weight',
    );
    const a = '-A -t 10.0.0.1:80 -s rr\n-a --tcp-service 10.0.0.1:80 -r 10.1.0.1:80';
    expect(fail(`${a} --persistent 60 -q 1`)).toBe('s:2: unexpected option(s) on an -a line: --persistent -q');
    expect(fail(`${a} --masquerading -g`)).toBe('s:2: several forwarding methods: --masquerading -g');
  });

  it('rejects every truncation of a view either cleanly or not at all', () => {
    for (const [name, text] of Object.entries(views)) {
      for (let n = 0; n < text.length; n += 7) {
        try {
          if (name === 'save') parseIpvsadmSave(text.slice(0, n));
          else parseIpvsadmList(text.slice(0, n));
        } catch (e) {
          expect(e, `${name} cut at ${n}`).toBeInstanceOf(IpvsadmParseError);
        }
      }
    }
  });
});
