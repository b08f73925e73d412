// Guest side of test/vm/kernel-matrix.sh (root inside the VM, cwd = the project root, run by the
// host's node over the 9p root): the shipped agent on this VM's kernel. Builds the loop lab
// (src/demo/lab.ts) in namespaces, adds a real IPVS virtual server for the lab's ClusterIP in node1,
// makes one looped connection before the agent starts (for the conntrack dump) and more after (for
// the events), and runs dist/bundle/main.js on the image's Node (IMAGE_NODE) with
// deploy/daemonset.yaml's node flags and env inside node1's namespace, as hostNetwork puts it on a
// node. Writes "=== name" sections, one "check NAME ok|FAIL detail" line per requirement and
// finally "RESULT PASS" or "RESULT FAIL ..." to the file KCHECK_OUT (on the share, which the VM syncs
// before it stops: the tail of a long console output can be lost when the guest reboots), and the
// check and result lines also on stdout.
import { spawn, spawnSync } from 'node:child_process';
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { createLoopLab, LAB } from '../../dist/src/demo/lab.js';

const transcript = process.env.KCHECK_OUT;
if (!transcript) throw new Error('KCHECK_OUT (the transcript file) is not set');
writeFileSync(transcript, '');
const t0 = Date.now();
const ms = () => Date.now() - t0;
const write = (text) => appendFileSync(transcript, `${text}\n`);
const say = (text) => {
  write(text);
  console.log(text);
};
const section = (name, text = '') => write(`=== ${name} (${ms()} ms)\n${text}`.trimEnd());
const checks = [];
const check = (name, ok, detail) => {
  checks.push({ name, ok });
  say(`check ${name} ${ok ? 'ok' : 'FAIL'} ${detail}`);
};
const sleep = (n) => new Promise((r) => setTimeout(r, n));

const imageNode = process.env.IMAGE_NODE;
if (!imageNode) throw new Error('IMAGE_NODE (the image node binary) is not set');
const [major, minor] = readFileSync('/proc/sys/kernel/osrelease', 'utf8').split('.').map(Number);
const tcx = major > 6 || (major === 6 && minor >= 6);

/** The DaemonSet's agent container: node's flags (between node and the script) and literal env. */
function manifestAgent() {
  const ds = parseAllDocuments(readFileSync('deploy/daemonset.yaml', 'utf8')).map((d) => d.toJS()).find((d) => d?.kind === 'DaemonSet');
  const c = ds.spec.template.spec.containers.find((x) => x.name === 'agent');
  const script = c.command.findIndex((a) => a.endsWith('/dist/bundle/main.js'));
  if (c.command[0] !== 'node' || script < 0) throw new Error(`unexpected agent command: ${c.command.join(' ')}`);
  const env = Object.fromEntries(c.env.filter((e) => e.value !== undefined).map((e) => [e.name, e.value]));
  return { nodeFlags: c.command.slice(1, script), env };
}

function sh(ns, cmd) {
  const r = spawnSync('ip', ['netns', 'exec', ns.name, 'sh', '-c', cmd], { encoding: 'utf8' });
  return `${r.stdout}${r.stderr}`.trim();
}

/** Metric samples as {name, labels, value}; enough of the text format for the agent's output. */
function samples(text) {
  const out = [];
  for (const line of text.split('\n')) {
    const m = /^([a-z_:]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels = Object.fromEntries([...(m[2] ?? '').matchAll(/([a-z_]+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]));
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}
const value = (s, name, labels = {}) =>
  s.filter((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v)).reduce((a, x) => a + x.value, 0);
const has = (s, name, labels = {}) => s.some((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v));

/** Source ports of node1's conntrack entries from the client pod to the LB IP. */
function loopSports() {
  const out = sh(lab.node, `conntrack -L -p tcp --orig-dst ${LAB.vip} 2>/dev/null || true`);
  return new Set([...out.matchAll(new RegExp(`src=${LAB.clientPod.replaceAll('.', '\\.')} dst=${LAB.vip.replaceAll('.', '\\.')} sport=(\\d+)`, 'g'))].map((m) => m[1]));
}

/** One TCP connect from the client pod to the LB IP (bash, not node: ~80 ms to start in the VM, not seconds); the new entries' source ports. */
function loopConnect() {
  const old = loopSports();
  sh(lab.pod, `timeout 3 bash -c 'exec 3<>/dev/tcp/${LAB.vip}/${LAB.port}' 2>/dev/null`);
  return new Set([...loopSports()].filter((p) => !old.has(p)));
}

const dir = mkdtempSync(join(tmpdir(), 'kcheck-'));
let lab;
let agent;
let log = '';
try {
  section('kernel', `${readFileSync('/proc/version', 'utf8').trim()}\nexpected attach: ${tcx ? 'TCX' : 'tc cls_bpf'}`);
  lab = await createLoopLab('Local', 'km-');
  // Real IPVS virtual servers (the lab stands in for IPVS with a DNAT rule where the kernel has
  // none; this one has it): the ClusterIP's, and the LB IP's as kube-proxy makes it in IPVS mode,
  // not bound on the node (the TKE behaviour), so pod -> LB IP still leaves the node.
  section('ipvs', sh(lab.node, [LAB.clusterIp, LAB.vip].map((ip) => `ipvsadm -A -t ${ip}:${LAB.port} -s rr && ipvsadm -a -t ${ip}:${LAB.port} -r ${LAB.serverPod}:${LAB.serverPort} -m`).join(' && ') + ' && ipvsadm -Ln'));
  // nft rules of their own next to the lab's iptables ones, so the nft reader reads a table it did not make.
  section('nft', sh(lab.node, 'nft add table inet kcheck && nft add chain inet kcheck input "{ type filter hook input priority 0; }" && nft add rule inet kcheck input tcp dport 9 counter && nft list table inet kcheck'));
  // A looped connect's entries stay SYN_SENT UNREPLIED: keep them 10 minutes (the default is 2), so
  // the one made before the agent is still there for its dump however slow the VM is.
  section('syn-sent-timeout', sh(lab.node, 'sysctl -w net.netfilter.nf_conntrack_tcp_timeout_syn_sent=600'));
  const before = loopConnect();
  section('connect-before-agent', `sports ${[...before].join(' ')}`);
  section('conntrack-before-agent', sh(lab.node, `conntrack -L 2>/dev/null | grep -E '${LAB.vip}|dport=${LAB.nodePort}' || true`));

  const clusterFile = lab.writeClusterFile(dir);
  const { nodeFlags, env } = manifestAgent();
  const argv = [...nodeFlags, 'dist/bundle/main.js', 'agent', '--cluster-file', clusterFile, '--node-name', LAB.node1Name,
    '--listen', '127.0.0.1:9811', '--evidence-socket', join(dir, 'ev.sock'), '--metrics-auth', 'none', '--resync-interval', '2s'];
  section('agent-command', `ip netns exec ${lab.node.name} ${imageNode} ${argv.join(' ')}`);
  const agentStart = ms();
  agent = spawn('ip', ['netns', 'exec', lab.node.name, imageNode, ...argv], {
    env: { ...process.env, ...env, NODE_NAME: LAB.node1Name },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  agent.stdout.on('data', (b) => (log += b));
  agent.stderr.on('data', (b) => (log += b));
  const exited = new Promise((r) => agent.once('exit', (code, sig) => r(`exit ${code ?? sig}`)));
  const scrape = () => samples(sh(lab.node, 'curl -sf -m 10 http://127.0.0.1:9811/metrics'));
  const waitFor = async (what, timeoutMs, f) => {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const r = await Promise.race([f(), exited.then((e) => { throw new Error(`agent ended (${e}) while waiting for ${what}`); })]);
      if (r) return r;
      if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
      await sleep(500);
    }
  };
  await waitFor('first sync, counters and the evidence socket', 180_000, async () => /first sync done/.test(log) && /evidence socket listening/.test(log) && /counters running|counters off|counter.*fail/i.test(log));
  section('agent-ready', `${ms() - agentStart} ms after start`);
  const first = scrape();
  // The agent's own conntrack entries of lab/web (clbprobe evidence over its socket), as JSON lines.
  const evidence = () => {
    const r = spawnSync(imageNode, ['dist/bundle/main.js', 'evidence', '--service', 'lab/web', '--socket', join(dir, 'ev.sock'), '--json'], { encoding: 'utf8', timeout: 60_000 });
    return `${r.stdout}${r.stderr}`;
  };
  const holds = (text, sports) => [...sports].some((p) => text.includes(`"sport":${p},`));
  const atFirst = evidence();
  section('evidence-first', atFirst);

  // Events: a fresh loop while the agent listens; its entries can only reach the agent as events.
  const after = loopConnect();
  section('connect-after-agent', `sports ${[...after].join(' ')}`);
  const web = { namespace: 'lab', service: 'web' };
  let last = [];
  let atLast = '';
  await waitFor('the new connection in the evidence, the active finding and counted packets', 90_000, async () => {
    last = scrape();
    atLast = evidence();
    return holds(atLast, after) && value(last, 'clbprobe_findings_active', { ...web, mechanism: 'L4-loop', severity: 'active' }) > 0 && value(last, 'clbprobe_lb_path_packets_total', web) > 0;
  }).catch((e) => section('wait-error', e.message));
  section('evidence-last', atLast);

  // The checks.
  const counters = /"counter":"([^"]*)","msg":"counters running"/.exec(log)?.[1] ?? 'no "counters running" line';
  const attach = /^eBPF \((\w+)\)/.exec(counters)?.[1] ?? 'none';
  check('counters', attach === (tcx ? 'tcx' : 'tc'), `${counters} (want eBPF ${tcx ? 'tcx' : 'tc, cls_bpf'})`);
  check('conntrack-filter', /pre-filtered in the kernel/.test(log), /conntrack events[^\n]*/.exec(log)?.[0]?.slice(0, 300) ?? 'no log line about the conntrack filter');
  const up = last.filter((x) => x.name === 'clbprobe_source_up');
  section('sources', up.map((x) => `${x.labels.source} ${x.value}`).join('\n'));
  // iptables rules are the nat source; routes, local-routes.
  for (const source of ['addresses', 'local-routes', 'conntrack', 'ipvs', 'nat']) {
    const s = up.find((x) => x.labels.source === source);
    check(`source-${source}`, s?.value === 1, s ? `source_up ${s.value}` : 'no source_up series');
  }
  // The nft reader reads every table and finds no kube-proxy one here (the lab's kube-proxy is in
  // IPVS mode): it must have read, without errors, and said so.
  const nftAbsent = /"source":"nft","reason":"([^"]*)","msg":"source not present on this node"/.exec(log)?.[1];
  check('source-nft', value(last, 'clbprobe_resyncs_total', { source: 'nft' }) > 0 && value(last, 'clbprobe_errors_total', { source: 'nft' }) === 0 && nftAbsent !== undefined,
    `reads ${value(last, 'clbprobe_resyncs_total', { source: 'nft' })}, errors ${value(last, 'clbprobe_errors_total', { source: 'nft' })}, ${nftAbsent ?? 'no "source not present" line'}`);
  // The entry made before the agent reached it through the dump (no event carries an entry older than the listener).
  check('conntrack-dump', before.size > 0 && holds(atFirst, before), `the agent's evidence right after its first sync ${holds(atFirst, before) ? 'holds' : 'lacks'} the loop made before it started (source ports ${[...before].join(' ') || 'none'})`);
  const dumps = (x) => value(x, 'clbprobe_resyncs_total', { source: 'conntrack' });
  check('conntrack-events', after.size > 0 && holds(atLast, after) && dumps(last) === dumps(first),
    `the evidence ${holds(atLast, after) ? 'holds' : 'lacks'} the loop made after the first sync (source ports ${[...after].join(' ') || 'none'}); conntrack dumps ${dumps(first)} -> ${dumps(last)}`);
  const realServers = (locality) => value(last, 'clbprobe_ipvs_real_servers', { ...web, locality });
  check('ipvs-read', realServers('local') === 1 && realServers('remote') === 0, `IPVS real servers behind lab/web's LB IP: local ${realServers('local')}, remote ${realServers('remote')} (want 1, 0)`);
  check('loop-counted', value(last, 'clbprobe_lb_path_packets_total', web) > 0, `lb_path_packets_total of lab/web: ${value(last, 'clbprobe_lb_path_packets_total', web)}`);
  const findings = last.filter((x) => x.name === 'clbprobe_findings_active' && x.value > 0).map((x) => JSON.stringify(x.labels));
  check('loop-diagnosed', findings.some((f) => /L4-loop/.test(f) && /"active"/.test(f)), `active findings: ${findings.join(' ') || 'none'}`);
  section('metrics', last.filter((x) => x.name.startsWith('clbprobe_') && !x.name.startsWith('clbprobe_source_duration')).map((x) => `${x.name}${JSON.stringify(x.labels)} ${x.value}`).join('\n'));
} catch (e) {
  check('run', false, e instanceof Error ? e.stack ?? e.message : String(e));
} finally {
  agent?.kill('SIGTERM');
  await sleep(1000);
  agent?.kill('SIGKILL');
  section('agent-log', log.split('\n').slice(-60).join('\n'));
  lab?.destroy();
  rmSync(dir, { recursive: true, force: true });
}
section('timing', `${ms()} ms in the guest`);
const failed = checks.filter((c) => !c.ok).map((c) => c.name);
say(failed.length ? `RESULT FAIL ${failed.join(',')}` : 'RESULT PASS');
process.exit(failed.length ? 1 : 0);
