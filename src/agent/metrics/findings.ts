// The last diagnosis' findings, one series per Service port, mechanism and severity while reported.
import { Gauge } from 'prom-client';
import type { Collector } from './collector.js';
import { PORT_LABELS } from './service-ports.js';

export const findings: Collector = {
  register(registry, scrape) {
    new Gauge({
      name: 'clbprobe_findings_active',
      help: 'Findings currently reported for a Service port (1 while present), by mechanism and severity.',
      labelNames: [...PORT_LABELS, 'mechanism', 'severity'],
      registers: [registry],
      collect() {
        this.reset();
        for (const port of scrape().servicePorts.ports)
          for (const f of port.findings) this.set({ ...port.labels, ...f }, 1);
      },
    });
  },
};
