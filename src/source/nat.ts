// kube-proxy's iptables/ip6tables rules and ipsets, read together by the save commands; ipset is a part.
import type { BundleFiles } from '../bundle/files.js';
import { BUNDLE_FILES, backendSaveFile } from '../bundle/names.js';
import { onPath } from '../bundle/writer.js';
import { errText } from '../errors.js';
import { type BackendOutput, chooseBackend } from '../kernel/nat/backend.js';
import { parseIpsetList, parseIpsetSave } from '../kernel/nat/ipset.js';
import { parseIptablesSave } from '../kernel/nat/iptables-save.js';
import type { BackendChoice, IpsetDump, IptablesDump, NatSnapshot, XtablesBackend } from '../kernel/nat/types.js';
import { readNatFacts } from '../kubeproxy/read-facts.js';
import type { SourceStatus } from '../model/source-status.js';
import { type ReadResult, readerOf, type SourceDef } from './contract.js';

export const nat: SourceDef<NatSnapshot> = {
  name: 'nat',
  key: 'nat',
  live(opts) {
    // The same rules again are "unchanged", which keeps the prepared diagnosis and rendered findings.
    let digest: string | undefined;
    return readerOf(nat, async () => {
      const r = await readNatFacts({
        ...(opts.netns ? { netns: opts.netns } : {}),
        ...(digest ? { unchangedSince: digest } : {}),
        ...(opts.natFactsOnly ? { factsOnly: true } : {}),
      });
      if (r.unchanged) return { state: 'unchanged' };
      digest = r.digest;
      const own = r.sources.find((s) => s.source === 'nat');
      const parts = r.sources.filter((s) => s.source !== 'nat');
      if (!r.nat) return { state: 'down', reason: own?.reason ?? 'unreadable', parts };
      return { state: 'up', value: r.nat, parts, ...(own?.reason ? { note: own.reason } : {}) };
    });
  },
  /** Both xtables backends when their save commands exist (the reader picks kube-proxy's), else plain iptables-save. */
  async collect(writer) {
    let any = false;
    for (const backend of ['legacy', 'nft'] as const) {
      for (const fam of [4, 6] as const) {
        const cmd = `ip${fam === 6 ? '6' : ''}tables-${backend}-save`;
        if (!onPath(cmd)) {
          writer.skip(cmd, `${cmd} not found in PATH`);
          continue;
        }
        any = true;
        await writer.run(backendSaveFile(backend, fam), [cmd]);
      }
    }
    if (!any) {
      await writer.run(BUNDLE_FILES.iptablesSave, ['iptables-save']);
      await writer.run(BUNDLE_FILES.ip6tablesSave, ['ip6tables-save']);
    }
    await writer.run(BUNDLE_FILES.ipset, ['ipset', 'save']);
  },
  fromBundle(bundle): ReadResult<NatSnapshot> {
    const warnings: string[] = [];
    const { ipsets, status } = bundleIpsets(bundle, warnings);
    const parts = [status];
    const perBackend = BACKENDS.some((k) => bundle.has(backendSaveFile(k, 4)) || bundle.has(backendSaveFile(k, 6)));
    const plain = bundle.has(BUNDLE_FILES.iptablesSave) || bundle.has(BUNDLE_FILES.ip6tablesSave);
    if (!perBackend && !plain)
      return { state: 'down', reason: bundle.whyMissing(BUNDLE_FILES.iptablesSave), parts, warnings };
    try {
      const { choice, files } = perBackend ? backendOfBoth(bundle) : backendOfHeader(bundle);
      const dump = (family: 4 | 6): IptablesDump | undefined =>
        bundle.has(files[family])
          ? parseIptablesSave(bundle.text(files[family]), { source: bundle.path(files[family]), family })
          : undefined;
      const v4 = dump(4);
      const v6 = dump(6);
      const notes = v4 ? [] : [`${files[4]} not in the bundle: no IPv4 rules`];
      // A save output the bundle lacks (dump() gave none) leaves that family's rules unknown, not empty.
      const unreadable: NatSnapshot['unreadable'] = {};
      if (!v4) unreadable[4] = bundle.whyMissing(files[4]);
      if (!v6) unreadable[6] = bundle.whyMissing(files[6]);
      const value: NatSnapshot = {
        backend: choice.backend,
        backendChoice: choice,
        ...(v4 ? { v4 } : {}),
        ...(v6 ? { v6 } : {}),
        ...(ipsets ? { ipsets } : {}),
        ...(Object.keys(unreadable).length > 0 ? { unreadable } : {}),
        warnings: notes,
      };
      warnings.push(...(v4?.warnings ?? []), ...(v6?.warnings ?? []), ...notes);
      return { state: 'up', value, note: choice.reason, parts, warnings };
    } catch (e) {
      return { state: 'down', reason: errText(e), parts, warnings: [...warnings, errText(e)] };
    }
  },
};

const BACKENDS: readonly XtablesBackend[] = ['legacy', 'nft'];

type BundleBackend = { choice: BackendChoice; files: Record<4 | 6, string> };

/** ipset.txt (`ipset save` or `ipset list` output), reported as the ipset part. */
function bundleIpsets(bundle: BundleFiles, warnings: string[]): { ipsets?: IpsetDump; status: SourceStatus } {
  const file = BUNDLE_FILES.ipset;
  if (!bundle.has(file)) return { status: { source: 'ipset', available: false, reason: bundle.whyMissing(file) } };
  try {
    const text = bundle.text(file);
    const path = bundle.path(file);
    const ipsets = /^\s*Name: /m.test(text) ? parseIpsetList(text, path) : parseIpsetSave(text, path);
    warnings.push(...ipsets.warnings);
    return { ipsets, status: { source: 'ipset', available: true } };
  } catch (e) {
    warnings.push(errText(e));
    return { status: { source: 'ipset', available: false, reason: errText(e) } };
  }
}

/** kube-proxy's backend from both backends' files, as the live reader chooses it. */
function backendOfBoth(bundle: BundleFiles): BundleBackend {
  const outputOf = (backend: XtablesBackend): BackendOutput => {
    const present = ([4, 6] as const).map((f) => backendSaveFile(backend, f)).filter((f) => bundle.has(f));
    return present.length > 0
      ? { texts: present.map((f) => bundle.text(f)) }
      : { texts: [], error: `${backendSaveFile(backend, 4)} not in the bundle` };
  };
  const choice = chooseBackend(outputOf('legacy'), outputOf('nft'));
  return { choice, files: { 4: backendSaveFile(choice.backend, 4), 6: backendSaveFile(choice.backend, 6) } };
}

/** The backend of plain iptables-save output, from its "# Generated by" header. */
function backendOfHeader(bundle: BundleFiles): BundleBackend {
  const files = { 4: BUNDLE_FILES.iptablesSave, 6: BUNDLE_FILES.ip6tablesSave };
  const header = Object.values(files)
    .filter((f) => bundle.has(f))
    .map((f) => bundle.text(f))
    .join('\n');
  const backend = /^# Generated by ip6?tables(-nft)?-save .*\(nf_tables\)/m.test(header) ? 'nft' : 'legacy';
  const none = { ruleLines: 0, kubeRuleLines: 0, kubeletChains: false };
  return {
    choice: { backend, reason: `one iptables-save output; its header says ${backend}`, legacy: none, nft: none },
    files,
  };
}
