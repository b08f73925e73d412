// `clbprobe collect` where IPVS exists: this kernel has none, so one VM boots
// Debian's kernel (test/vm/vm.ts), builds a kube-proxy-like IPVS table on a
// dummy kube-ipvs0, and runs the compiled collect twice: with ipvsadm (bundle
// gets ipvsadm-save.txt + ipvsadm-stats.txt) and with ipvsadm hidden from PATH
// (bundle gets ipvs.json from our genl reader). Both bundles are read back in
// the guest with readBundle; both must give the table ipvsadm shows. (The CLI
// path itself is covered by test/lab/collect.test.ts; here one node process
// does everything, since each node start costs seconds under TCG.)
import { beforeAll, describe, expect, it } from 'vitest';
import { assertBuilt, type GuestResult, runInGuest, sections } from '../vm/vm.js';

const SCRIPT = String.raw`
set -eu
ip link add kube-ipvs0 type dummy
ip addr add 10.96.0.10/32 dev kube-ipvs0
ip addr add 192.0.2.10/32 dev kube-ipvs0
ipvsadm -A -t 10.96.0.10:80 -s rr
ipvsadm -a -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 1
ipvsadm -a -t 10.96.0.10:80 -r 10.244.2.3:8080 -m -w 1
ipvsadm -A -t 192.0.2.10:443 -s wrr -p 600
ipvsadm -a -t 192.0.2.10:443 -r 10.244.1.2:8443 -m -w 3
ipvsadm -A -u 10.96.0.10:53 -s rr
ipvsadm -a -u 10.96.0.10:53 -r 10.244.1.2:53 -m
out=$(mktemp -d)
# The same collect without ipvsadm on PATH: only the tools its other steps use.
bin=$(mktemp -d)
for t in ip nsenter sysctl uname iptables-nft-save ip6tables-nft-save ipset; do
  p=$(command -v "$t" || true); [ -n "$p" ] && ln -s "$p" "$bin/$t"
done
echo "=== expected"; ipvsadm -Ln
# One node process for both runs (each node start costs seconds under TCG):
# the compiled collect and read modules, as the CLI calls them.
node --input-type=module -e '
  const { collectBundle } = await import(process.cwd() + "/dist/src/source/bundle-collect.js");
  const { readBundle } = await import(process.cwd() + "/dist/src/source/bundle-read.js");
  const { readdirSync } = await import("node:fs");
  const [out, bin] = process.argv.slice(1);
  const show = (name, text) => process.stdout.write("=== " + name + "\n" + text + "\n");
  const read = (dir) => { const r = readBundle(dir); return JSON.stringify({ ipvs: r.node.ipvs, addresses: r.node.addresses, sources: r.node.sources }); };
  let t = Date.now();
  const m = await collectBundle({ out: out + "/with" });
  const withMs = Date.now() - t;
  process.env.PATH = bin;
  t = Date.now();
  await collectBundle({ out: out + "/without" });
  show("timing", "collect with ipvsadm " + withMs + " ms, without " + (Date.now() - t) + " ms");
  show("files-with", readdirSync(out + "/with").join("\n"));
  show("manifest-with", JSON.stringify(m));
  show("read-with", read(out + "/with"));
  show("files-without", readdirSync(out + "/without").join("\n"));
  show("read-without", read(out + "/without"));
' "$out" "$bin"
echo "=== end"
`;

interface Read {
  ipvs?: {
    virtualServers: {
      protocol: string;
      address?: string;
      port?: number;
      scheduler: string;
      realServers: { address: string; port: number; weight: number }[];
    }[];
  };
  addresses?: { interfaces: { name: string; isKubeIpvs: boolean; addresses: { address: string }[] }[] };
  sources: { source: string; available: boolean; reason?: string }[];
}

/** Virtual servers as 'TCP 10.96.0.10:80 rr -> 10.244.1.2:8080 w1, ...', sorted. */
function table(r: Read): string[] {
  return (r.ipvs?.virtualServers ?? [])
    .map(
      (v) =>
        `${v.protocol} ${v.address}:${v.port} ${v.scheduler} -> ${v.realServers
          .map((s) => `${s.address}:${s.port} w${s.weight}`)
          .sort()
          .join(', ')}`,
    )
    .sort();
}

const EXPECTED = [
  'TCP 10.96.0.10:80 rr -> 10.244.1.2:8080 w1, 10.244.2.3:8080 w1',
  'TCP 192.0.2.10:443 wrr -> 10.244.1.2:8443 w3',
  'UDP 10.96.0.10:53 rr -> 10.244.1.2:53 w1',
];

describe('collect with IPVS (Debian kernel in a VM, compiled collect + readBundle)', () => {
  let run: GuestResult;
  let s: Record<string, string>;
  beforeAll(async () => {
    assertBuilt('dist/src/source/bundle-collect.js', [
      'src/source/bundle-collect.ts',
      'src/source/bundle-read.ts',
      'src/cli/collect.ts',
    ]);
    run = await runInGuest(SCRIPT, { timeoutS: 200 });
    s = sections(run.stdout);
    console.log(`collect-ipvs VM: ${run.wallMs} ms wall; ${s.timing?.trim()}`);
    if (run.code !== 0 || s.end === undefined)
      throw new Error(
        `guest script failed (exit ${run.code}):\n${run.stderr.slice(-3000)}\n${run.stdout.slice(-2000)}`,
      );
  }, 240_000);

  it('with ipvsadm: writes both ipvsadm views, and readBundle gives the table ipvsadm shows', () => {
    expect(s['files-with']).toMatch(/^ipvsadm-save\.txt$/m);
    expect(s['files-with']).toMatch(/^ipvsadm-stats\.txt$/m);
    const manifest = JSON.parse(s['manifest-with']!) as {
      files: { command: string; exitStatus?: number; error?: string }[];
    };
    expect(manifest.files.find((f) => f.command === 'ipvsadm-save -n')).toMatchObject({ exitStatus: 0 });
    expect(manifest.files.find((f) => f.command === 'ipvsadm -Ln --stats --exact')).toMatchObject({ exitStatus: 0 });
    const read = JSON.parse(s['read-with']!) as Read;
    expect(table(read)).toEqual(EXPECTED);
    expect(s.expected).toContain('TCP  192.0.2.10:443 wrr persistent 600');
    const ipvs0 = read.addresses!.interfaces[0]!;
    expect(ipvs0).toMatchObject({ name: 'kube-ipvs0', isKubeIpvs: true });
    expect(ipvs0.addresses.map((a) => a.address)).toEqual(['10.96.0.10', '192.0.2.10']);
    expect(read.sources.find((x) => x.source === 'ipvs')).toMatchObject({ available: true });
  });

  it('without ipvsadm: falls back to our genl reader (ipvs.json) with the same table', () => {
    expect(s['files-without']).toMatch(/^ipvs\.json$/m);
    expect(s['files-without']).not.toMatch(/ipvsadm/);
    expect(table(JSON.parse(s['read-without']!) as Read)).toEqual(EXPECTED);
  });
});
