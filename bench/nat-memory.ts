// NAT rules in memory on a large iptables-mode node, not a test: kube-proxy-format
// rules for S Services x E endpoints (bench/kube-proxy-rules.ts, from
// bench/agent-cluster.ts's cluster) loaded with the real iptables-restore into
// a namespace (cbns-nat*), then read by the NAT reader in child processes started
// with the DaemonSet's node flags (deploy/daemonset.yaml), each way:
//   none    a bare node process with the same loader (the reference)
//   full    what `snapshot` keeps: the parsed rules of every table (its facts derived after
//           the read by the same reader over the parsed dump, NatRules.ofDump)
//   facts   what the agent keeps: kube-proxy's NAT facts, derived by the nat table
//           reader (nat-rules.ts) from the nat table's lines kept as the save output
//           streams by (ReadNatOptions.factsOnly, nat-lines.ts)
//   parsed  the alternative design: every rule parsed, then the same facts derived
//           by the same reader over the parsed dump (NatRules.ofDump, as the snapshot
//           and bundles do) and copied; it cannot finish under the DaemonSet's 160 MB
//           heap at 5,000 Services, so this child alone gets a 1 GiB heap
// Each child reads, changes one rule, reads again while still holding the first
// result (as the agent's source runner does), and reports heap and RSS after a
// full GC, its peak RSS, and the read's wall and CPU time. Prints the host's load.
//   sudo node --import tsx bench/nat-memory.ts [--services 5000] [--endpoints 20000] [--modes none,facts,parsed,full] [--netns-prefix cbns-nat]
// (--netns-prefix: runs beside one another use their own namespace names)
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Netns } from '../src/demo/netns.js';
import { kubeNatFacts } from '../src/kubeproxy/facts.js';
import { readNatFacts } from '../src/kubeproxy/read-facts.js';
import { agentContainer, bytesOf, containerEnv, hostArgv, nodeCommand } from '../test/support/daemonset.js';
import { syntheticCluster } from './agent-cluster.js';
import { kubeProxyRules } from './kube-proxy-rules.js';

const argv = process.argv.slice(2);
const num = (name: string, dflt: number) => (argv.includes(name) ? Number(argv[argv.indexOf(name) + 1]) : dflt);
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
const mb = (bytes: number) => (bytes / 2 ** 20).toFixed(1);

function status(field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

function settled(): { heap: number; rss: number } {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run the child with --expose-gc');
  gc();
  gc();
  return { heap: process.memoryUsage().heapUsed, rss: status('VmRSS') };
}

/** One read the way `mode` reads, with its facts. */
async function readAs(mode: string, ns: string, unchangedSince?: string) {
  const r = await readNatFacts({
    netns: ns,
    timeoutMs: 120_000,
    ...(unchangedSince ? { unchangedSince } : {}),
    ...(mode === 'facts' ? { factsOnly: true } : {}),
  });
  if (mode === 'parsed' && r.nat) {
    const facts = JSON.parse(JSON.stringify(kubeNatFacts(r.nat))) as ReturnType<typeof kubeNatFacts>;
    return {
      ...r,
      nat: { backend: r.nat.backend, backendChoice: r.nat.backendChoice, warnings: r.nat.warnings, facts },
    };
  }
  return r;
}

/** In the child: read, change a rule, read again holding the first result. */
async function child(mode: string, ns: string): Promise<void> {
  const out: Record<string, unknown> = { mode };
  if (mode !== 'none') {
    const t0 = performance.now();
    const c0 = process.cpuUsage();
    const first = await readAs(mode, ns);
    const c1 = process.cpuUsage(c0);
    out.readMs = Math.round(performance.now() - t0);
    out.readCpuMs = Math.round((c1.user + c1.system) / 1000);
    if (!first.nat) throw new Error(`nat unreadable: ${JSON.stringify(first.sources)}`);
    const f0 = process.cpuUsage();
    const facts = kubeNatFacts(first.nat);
    const f1 = process.cpuUsage(f0);
    out.factsCpuMs = Math.round((f1.user + f1.system) / 1000);
    out.loadBalancers = facts.loadBalancers.length;
    out.mode = `${mode} (proxy mode ${facts.mode})`;
    out.afterRead = settled();
    execFileSync('ip', [
      'netns',
      'exec',
      ns,
      'iptables',
      '-t',
      'nat',
      '-I',
      'KUBE-SERVICES',
      '-d',
      '10.255.255.1/32',
      '-j',
      'RETURN',
    ]);
    const second = await readAs(mode, ns, first.digest);
    if (second.unchanged || !second.nat) throw new Error('the second read did not see the rule change');
    out.afterChange = settled();
    out.held = [first.nat.backend, second.nat.backend].length; // both results stay reachable up to here
    execFileSync('ip', [
      'netns',
      'exec',
      ns,
      'iptables',
      '-t',
      'nat',
      '-D',
      'KUBE-SERVICES',
      '-d',
      '10.255.255.1/32',
      '-j',
      'RETURN',
    ]);
    const c2 = process.cpuUsage();
    const third = await readAs(mode, ns, first.digest);
    const c3 = process.cpuUsage(c2);
    if (!third.unchanged) throw new Error('the re-read after undoing the change did not find the first rules');
    out.unchangedCpuMs = Math.round((c3.user + c3.system) / 1000);
  } else {
    out.afterRead = settled();
  }
  out.peakRss = status('VmHWM');
  console.log(JSON.stringify(out));
}

async function main(): Promise<void> {
  if (argv[0] === '--child') return child(argv[1]!, argv[2]!);
  if (process.getuid?.() !== 0) throw new Error('run as root (namespaces, iptables-restore)');
  const services = num('--services', 5000);
  const endpoints = num('--endpoints', 20_000);
  const commit = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).stdout.trim();
  console.log(`NAT memory benchmark at ${commit}: ${services} Services, ${endpoints} endpoints, load avg ${load()}`);
  const cluster = syntheticCluster(services, endpoints);
  const rules = kubeProxyRules(cluster.list.items);
  const dir = mkdtempSync(join(tmpdir(), 'cbns-nat-'));
  const ns = Netns.create(argv.includes('--netns-prefix') ? argv[argv.indexOf('--netns-prefix') + 1]! : 'cbns-nat');
  try {
    const file = join(dir, 'rules');
    writeFileSync(file, rules.text);
    const t0 = performance.now();
    execFileSync('sh', ['-c', `ip netns exec ${ns.name} iptables-restore < ${file}`]);
    const save = execFileSync('ip', ['netns', 'exec', ns.name, 'iptables-save'], { maxBuffer: 1 << 30 });
    console.log(
      `rules: ${rules.rules} lines restored in ${((performance.now() - t0) / 1000).toFixed(1)} s (iptables-restore, ${execFileSync('iptables', ['-V'], { encoding: 'utf8' }).trim()}); iptables-save prints ${mb(save.length)} MB`,
    );
    const container = agentContainer();
    const deployed = hostArgv(container);
    const v8flags = nodeCommand(deployed).nodeFlags;
    const limit = container.resources.limits.memory;
    const limitBytes = limit ? bytesOf(limit) : Infinity;
    // The DaemonSet's env too (MALLOC_ARENA_MAX shapes RSS).
    const env = { ...process.env, ...containerEnv(container, { 'spec.nodeName': 'bench' }) };
    console.log(
      `children run with the DaemonSet's node flags: ${v8flags.join(' ')}, env MALLOC_ARENA_MAX=${env.MALLOC_ARENA_MAX ?? '(unset)'} (memory limit ${limit ?? 'none'})`,
    );
    console.log(
      'mode | read (wall / CPU) | unchanged re-read CPU | LB facts (CPU of kubeNatFacts after the read) | heap after read | RSS after read | heap after change (both held) | RSS after change | peak RSS | peak RSS / bare node | within limit | load avg',
    );
    const self = fileURLToPath(import.meta.url);
    const modes = (argv.includes('--modes') ? argv[argv.indexOf('--modes') + 1]! : 'none,facts,parsed,full').split(',');
    let bare: number | undefined;
    for (const mode of modes) {
      // The CPU reference cannot finish under the DaemonSet's heap at 5,000 Services (see the top).
      const flags =
        mode === 'parsed'
          ? [...v8flags.filter((f) => !f.startsWith('--max-old-space-size')), '--max-old-space-size=1024']
          : v8flags;
      const r = spawnSync(
        process.execPath,
        [...flags, '--expose-gc', '--import', 'tsx', self, '--child', mode, ns.name],
        { encoding: 'utf8', maxBuffer: 1 << 24, env },
      );
      if (r.status !== 0) {
        const why = r.stderr.includes('heap out of memory')
          ? 'died: JavaScript heap out of memory'
          : `exited ${r.status ?? r.signal}: ${r.stderr.trim().split('\n').slice(-3).join(' ')}`;
        console.log(`${mode} | ${why} | | | | | | | | | no | ${load()}`);
        continue;
      }
      const o = JSON.parse(r.stdout.trim().split('\n').pop()!) as {
        mode: string;
        readMs?: number;
        readCpuMs?: number;
        unchangedCpuMs?: number;
        loadBalancers?: number;
        factsCpuMs?: number;
        afterRead: { heap: number; rss: number };
        afterChange?: { heap: number; rss: number };
        peakRss: number;
      };
      if (mode === 'none') bare = o.peakRss;
      const ratio = bare ? `${(o.peakRss / bare).toFixed(2)}x` : '-';
      const within = mode === 'parsed' ? 'n/a (1 GiB heap)' : o.peakRss <= limitBytes ? 'yes' : 'NO';
      console.log(
        `${o.mode} | ${o.readMs !== undefined ? `${o.readMs} / ${o.readCpuMs} ms` : '-'} | ${o.unchangedCpuMs !== undefined ? `${o.unchangedCpuMs} ms` : '-'} | ${o.loadBalancers !== undefined ? `${o.loadBalancers} (${o.factsCpuMs} ms)` : '-'} | ${mb(o.afterRead.heap)} MB | ${mb(o.afterRead.rss)} MB | ${o.afterChange ? `${mb(o.afterChange.heap)} MB` : '-'} | ${o.afterChange ? `${mb(o.afterChange.rss)} MB` : '-'} | ${mb(o.peakRss)} MB | ${ratio} | ${within} | ${load()}`,
      );
    }
  } finally {
    ns.delete();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(`bench/nat-memory: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
});
