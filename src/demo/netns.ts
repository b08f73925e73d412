// Network namespaces for the demo lab and the real-kernel tests, named per run and removed also on failure and exit.
import { execFileSync, spawnSync } from 'node:child_process';

export class Netns {
  readonly path: string;
  private constructor(readonly name: string) {
    this.path = `/var/run/netns/${name}`;
  }

  /** Creates NAME = prefix + pid + counter, with lo up. */
  static create(prefix: string): Netns {
    const name = `${prefix}${process.pid % 100000}-${Netns.counter++}`;
    execFileSync('ip', ['netns', 'add', name]);
    const ns = new Netns(name);
    ns.run('ip', 'link', 'set', 'lo', 'up');
    Netns.live.add(ns);
    return ns;
  }
  private static counter = 0;
  private static readonly live = new Set<Netns>();

  /** Runs a command inside the namespace; throws with its stderr on failure. */
  run(cmd: string, ...args: string[]): string {
    const r = spawnSync('ip', ['netns', 'exec', this.name, cmd, ...args], { encoding: 'utf8' });
    if (r.status !== 0) {
      throw new Error(`[${this.name}] ${cmd} ${args.join(' ')} exited ${r.status}: ${r.stderr.trim()}`);
    }
    return r.stdout;
  }

  sh(script: string): string {
    return this.run('bash', '-euo', 'pipefail', '-c', script);
  }

  delete(): void {
    if (!Netns.live.delete(this)) return;
    const pids = spawnSync('ip', ['netns', 'pids', this.name], { encoding: 'utf8' }).stdout.split('\n');
    for (const pid of pids.filter(Boolean)) spawnSync('kill', ['-9', pid]);
    spawnSync('ip', ['netns', 'delete', this.name]);
  }

  static deleteAll(): void {
    for (const ns of [...Netns.live]) ns.delete();
  }
}

/** Joins two namespaces with a veth pair named a/b inside them. */
export function vethPair(a: Netns, aName: string, b: Netns, bName: string): void {
  const tmp = `cbt${process.pid % 100000}${Math.floor(Math.random() * 1000)}`;
  execFileSync('ip', ['link', 'add', `${tmp}a`, 'netns', a.name, 'type', 'veth', 'peer', `${tmp}b`, 'netns', b.name]);
  a.run('ip', 'link', 'set', `${tmp}a`, 'name', aName);
  b.run('ip', 'link', 'set', `${tmp}b`, 'name', bName);
  a.run('ip', 'link', 'set', aName, 'up');
  b.run('ip', 'link', 'set', bName, 'up');
}

process.on('exit', () => Netns.deleteAll());
