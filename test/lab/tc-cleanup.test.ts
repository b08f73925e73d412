// `clbprobe cleanup` after agents were SIGKILLed with legacy cls_bpf attach (kernels before 6.6):
// on cbx0 a "CNI" filter (u32 on ingress) shares the clsact qdisc and must survive with its
// qdisc; on cbx2 only our filters were there, so the qdisc goes too. The stand-in agent
// (test/lab/capture-agent.ts) attaches the real programs with `tc` mode; the command is the
// compiled CLI, run against the namespace. Namespaces are cbx-*.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isRoot, Netns } from '../support/netns.js';
import { requireBuiltCli, runCli } from '../support/run-cli.js';

/** Starts the stand-in agent on `ifname` in tc mode, waits for its hello, then SIGKILLs it. */
async function crashAgent(ns: Netns, ifname: string): Promise<string> {
  const script = fileURLToPath(new URL('./capture-agent.ts', import.meta.url));
  const child = spawn(process.execPath, ['--import', 'tsx', script, ifname, ns.path, 'tc'], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const hello = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString();
      if (out.includes('\n')) resolve(out.trim());
    });
    child.once('exit', (code) => reject(new Error(`stand-in agent exited ${code}`)));
  });
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
  return hello;
}

describe.skipIf(!isRoot)('clbprobe cleanup: cls_bpf leftovers of a SIGKILLed agent (namespaces cbx-*)', () => {
  let ns: Netns;
  const filters = (dev: string) =>
    ['ingress', 'egress'].map((h) => ns.run('tc', 'filter', 'show', 'dev', dev, h)).join('');
  const qdiscs = (dev: string) => ns.run('tc', 'qdisc', 'show', 'dev', dev);
  const cleanup = () => runCli(undefined, ['cleanup', '--netns', ns.path]);

  beforeAll(async () => {
    requireBuiltCli();
    ns = Netns.create('cbx-n');
    try {
      ns.sh(`
        ip link add cbx0 type veth peer name cbx1
        ip link add cbx2 type veth peer name cbx3
        for d in cbx0 cbx1 cbx2 cbx3; do ip link set $d up; done
        tc qdisc add dev cbx0 clsact
        tc filter add dev cbx0 ingress prio 10 u32 match u32 0 0`);
      for (const dev of ['cbx0', 'cbx2']) expect(JSON.parse(await crashAgent(ns, dev))).toMatchObject({ attach: 'tc' });
    } catch (e) {
      ns.delete();
      throw e;
    }
  }, 60_000);
  afterAll(() => ns?.delete());

  it('the killed agents left their filters', () => {
    expect(filters('cbx0')).toMatch(/clbp_ingress[\s\S]*clbp_egress/);
    expect(filters('cbx2')).toMatch(/clbp_ingress[\s\S]*clbp_egress/);
  });

  it('removes our filters everywhere; keeps the clsact qdisc that holds a foreign filter, deletes the one that held only ours', () => {
    const r = cleanup();
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('cbx0: removed 2 clbprobe tc filter(s); clsact qdisc kept (');
    expect(r.stdout).toContain('cbx2: removed 2 clbprobe tc filter(s); clsact qdisc deleted');
    expect(filters('cbx0')).not.toContain('clbp_');
    expect(filters('cbx0')).toMatch(/pref 10 u32/);
    expect(qdiscs('cbx0')).toMatch(/qdisc clsact ffff:/);
    expect(filters('cbx2')).toBe('');
    expect(qdiscs('cbx2')).not.toContain('clsact');
  });

  it('a second run finds nothing and changes nothing', () => {
    const r = cleanup();
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toBe('no clbprobe tc filters found\n');
    expect(filters('cbx0')).toMatch(/pref 10 u32/);
    expect(qdiscs('cbx0')).toMatch(/qdisc clsact ffff:/);
  });
});
