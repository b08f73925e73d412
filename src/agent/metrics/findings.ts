// The findings of the last diagnosis, one series per Service port, mechanism
// and severity while they are reported.
import { perServicePort } from '../../export/family.js';
import type { SvcPortLabels } from '../../export/state.js';
import { portKey } from '../../model/service.js';
import type { Finding } from '../../detect/types.js';
import type { Collector } from './collector.js';

type FindingItem = { svc: SvcPortLabels; mechanism: string; severity: string };

export interface FindingsPart {
  findings: FindingItem[];
}

export const findings: Collector<FindingsPart> = {
  families: [
    perServicePort<FindingsPart, FindingItem>({
      name: 'clbprobe_findings_active',
      help: 'Findings currently reported for a Service port (1 while present), by mechanism and severity.',
      type: 'gauge',
      items: (s) => s.findings,
      extra: [
        ['mechanism', (x) => x.mechanism],
        ['severity', (x) => x.severity],
      ],
      value: () => 1,
    }),
  ],
  empty: () => ({ findings: [] }),
  filler: () => {
    // Made again only when a diagnosis replaced the findings. Made per scrape, each would carry a
    // new labels object, and the exporter formats label text again for every new labels object.
    let cache: { of: readonly Finding[]; part: FindingsPart; labels: Map<string, SvcPortLabels> } | undefined;
    return ({ findings: of }) => {
      if (cache?.of === of) return cache.part;
      // A Service port keeps its labels object from one diagnosis to the next, so the exporter's
      // cached label text stays valid.
      const labels = new Map<string, SvcPortLabels>();
      const items = of.map((f) => {
        const id = portKey(f.service, f.port.protocol, f.port.port);
        let svc = labels.get(id) ?? cache?.labels.get(id);
        if (!svc) svc = { namespace: f.service.namespace, service: f.service.name, port: String(f.port.port), protocol: f.port.protocol };
        labels.set(id, svc);
        return { svc, mechanism: f.mechanism, severity: f.severity };
      });
      cache = { of, part: { findings: items }, labels };
      return cache.part;
    };
  },
};
