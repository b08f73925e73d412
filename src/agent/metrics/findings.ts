// The last diagnosis' findings, one series per Service port, mechanism and severity while reported.
import { families, type Sample } from './collector.js';
import { PORT_LABELS } from './service-ports.js';

export const findings = families({
  type: 'gauge',
  name: 'clbprobe_findings_active',
  help: 'Findings currently reported for a Service port (1 while present), by mechanism and severity.',
  labelNames: [...PORT_LABELS, 'mechanism', 'severity'],
  samples: ({ servicePorts }) =>
    servicePorts.ports.flatMap((port) => port.findings.map((f): Sample => [{ ...port.labels, ...f }, 1])),
});
