// kube-proxy's IPVS table (generic netlink; ipvsadm text in a bundle); absent on iptables or nftables nodes.
import { existsSync } from 'node:fs';
import { BUNDLE_FILES } from '../bundle/names.js';
import { ms, onPath, writeStep } from '../bundle/writer.js';
import { errText } from '../errors.js';
import { parseIpvsadm } from '../kernel/ipvs/ipvsadm-text.js';
import { mergeIpvsSnapshots } from '../kernel/ipvs/merge.js';
import { readIpvs } from '../kernel/ipvs/reader.js';
import type { IpvsSnapshot } from '../kernel/types.js';
import { readerOf, type SourceDef } from './contract.js';

export const ipvs: SourceDef<IpvsSnapshot> = {
  name: 'ipvs',
  key: 'ipvs',
  live(opts) {
    const ns = opts.netns ? { netns: opts.netns } : {};
    // Never "unchanged": connection counts move with traffic and appear in findings' evidence.
    return readerOf(ipvs, async () => {
      const r = await readIpvs(ns);
      if (r.status.notPresent) return { state: 'absent', reason: r.status.reason ?? 'not present' };
      if (!r.snapshot) return { state: 'down', reason: r.status.reason ?? 'unreadable' };
      return { state: 'up', value: r.snapshot };
    });
  },
  /** ipvsadm's two views when IPVS and ipvsadm are there; our own genl dump when only ipvsadm is missing. */
  async collect(writer) {
    // IPVS registers /proc/net/ip_vs in every namespace once the module is loaded.
    if (!existsSync('/proc/net/ip_vs'))
      return writer.skip(
        'ipvsadm-save -n',
        'IPVS is not loaded in this kernel (/proc/net/ip_vs absent): kube-proxy cannot be in IPVS mode',
      );
    if (onPath('ipvsadm-save') && onPath('ipvsadm')) {
      await writer.run(BUNDLE_FILES.ipvsadmSave, ['ipvsadm-save', '-n']);
      await writer.run(BUNDLE_FILES.ipvsadmStats, ['ipvsadm', '-Ln', '--stats', '--exact']);
      return;
    }
    const t0 = performance.now();
    const command = 'clbprobe IPVS reader (generic netlink), ipvsadm not installed';
    const { snapshot, status } = await readIpvs(writer.netns ? { netns: writer.netns } : {});
    if (!snapshot)
      return writer.add({ command, durationMs: ms(t0), error: status.reason ?? 'IPVS table not readable' });
    writer.add(writeStep(writer.out, BUNDLE_FILES.ipvsJson, command, `${JSON.stringify(snapshot, null, 2)}\n`, t0));
  },
  fromBundle(files) {
    const texts = files.names.filter((n) => /^ipvsadm.*\.txt$/.test(n)).sort();
    if (texts.length > 0) {
      // Each file on its own, so one bad view does not lose the others.
      const parts: IpvsSnapshot[] = [];
      const warnings: string[] = [];
      for (const f of texts) {
        try {
          parts.push(parseIpvsadm([{ source: files.path(f), text: files.text(f) }]));
        } catch (e) {
          warnings.push(errText(e));
        }
      }
      if (parts.length === 0) throw new Error(warnings.join('; '));
      return { state: 'up', value: mergeIpvsSnapshots(parts), warnings };
    }
    if (files.has(BUNDLE_FILES.ipvsJson)) {
      const snap = JSON.parse(files.text(BUNDLE_FILES.ipvsJson)) as IpvsSnapshot;
      if (!Array.isArray(snap?.virtualServers))
        throw new Error(`${files.path(BUNDLE_FILES.ipvsJson)}: no "virtualServers" array`);
      return { state: 'up', value: snap };
    }
    return { state: 'down', reason: files.whyMissing(BUNDLE_FILES.ipvsadmSave) };
  },
};
