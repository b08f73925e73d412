// `evidence --pcap` runs as root, often in a directory others can write: its output file is
// created anew, never through a symlink planted at its name nor over an existing file.
// Captures run on lo of a namespace this test creates.
import { lstatSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { capture } from '../../src/capture/pcap-capture.js';
import { isRoot, Netns } from '../support/netns.js';

describe.skipIf(!isRoot)('evidence capture output file', () => {
  let ns: Netns;
  let dir = '';
  beforeAll(() => {
    ns = Netns.create('cbh-pcap');
    dir = mkdtempSync(join(tmpdir(), 'cbh-pcap-'));
  });
  afterAll(() => {
    ns?.delete();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  const opts = (file: string) => ({ ifname: 'lo', file, durationS: 0.3, maxBytes: 1 << 20, netnsPath: ns.path });

  it('refuses a symlink at the output path and leaves its target alone', async () => {
    const target = join(dir, 'victim');
    writeFileSync(target, 'keep');
    const link = join(dir, 'link.pcap');
    symlinkSync(target, link);
    await expect(capture('tcp', opts(link))).rejects.toThrow(
      /exists \(a capture never overwrites a file or follows a symlink\)/,
    );
    expect(readFileSync(target, 'utf8')).toBe('keep');
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
  });

  it('refuses an existing file', async () => {
    const file = join(dir, 'old.pcap');
    writeFileSync(file, 'earlier capture');
    await expect(capture('tcp', opts(file))).rejects.toThrow(/exists/);
    expect(readFileSync(file, 'utf8')).toBe('earlier capture');
  });

  it('creates a new file, readable by its owner only, with the pcap header', async () => {
    const file = join(dir, 'new.pcap');
    const r = await capture('tcp', opts(file));
    expect(r.stoppedBy).toBe('time');
    const st = statSync(file);
    expect(st.isFile()).toBe(true);
    expect(st.mode & 0o777).toBe(0o600);
    expect(readFileSync(file).subarray(0, 4).readUInt32LE(0)).toBe(0xa1b2c3d4);
    expect(st.size).toBe(r.bytes);
  });

  it('leaves no file behind when the capture cannot start', async () => {
    const file = join(dir, 'nodev.pcap');
    await expect(capture('tcp', { ...opts(file), ifname: 'cbh-missing0' })).rejects.toThrow();
    expect(() => lstatSync(file)).toThrow(/ENOENT/);
  });
});
