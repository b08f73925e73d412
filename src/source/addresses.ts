// The node's interfaces and addresses (rtnetlink), kube-ipvs0 included: bound LB IPs and local source addresses.
import { BUNDLE_FILES } from '../bundle/names.js';
import { parseIpAddrJson } from '../bundle/parse-ip.js';
import { errText } from '../errors.js';
import { readAddresses, watchAddresses } from '../kernel/addresses.js';
import type { AddressSnapshot } from '../kernel/types.js';
import { fromBundleFile, readerOf, type SourceDef } from './contract.js';

export const addresses: SourceDef<AddressSnapshot> = {
  name: 'addresses',
  key: 'addresses',
  indexes: true,
  live(opts) {
    const ns = opts.netns ? { netns: opts.netns } : {};
    // The periodic re-read mostly finds the same addresses: nothing to rebuild then.
    let last: string | undefined;
    return readerOf(
      addresses,
      async () => {
        const r = await readAddresses(ns);
        if (!r.snapshot) {
          last = undefined;
          return { state: 'down', reason: r.status.reason ?? 'unreadable' };
        }
        const why = r.status.reason;
        // The note is part of what is compared: addresses read again in full clear an earlier "may be missing".
        const json = JSON.stringify([r.snapshot, why]);
        if (json === last) return { state: 'unchanged' };
        last = json;
        return { state: 'up', value: r.snapshot, ...(why ? { note: why, warnings: [`addresses: ${why}`] } : {}) };
      },
      (events) => {
        try {
          return watchAddresses(events.changed, events.changed, {
            ...ns,
            onError: (e) => events.failed(`address events: ${e.message}`),
          });
        } catch (e) {
          events.failed(`address events: ${errText(e)}`);
          return () => undefined;
        }
      },
    );
  },
  async collect(w) {
    await w.run(BUNDLE_FILES.ipAddr, ['ip', '-j', '-d', 'addr']);
  },
  fromBundle: (b) =>
    fromBundleFile(b, BUNDLE_FILES.ipAddr, (text, path) => ({ state: 'up', ...parseIpAddrJson(text, path) })),
};
