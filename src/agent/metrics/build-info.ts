// clbprobe_build_info: which clbprobe runs on which node.
import { Gauge } from 'prom-client';
import type { Collector } from './collector.js';

export const buildInfo: Collector = {
  register(registry, scrape) {
    new Gauge({
      name: 'clbprobe_build_info',
      help: 'Always 1; the labels say which clbprobe runs on which node.',
      labelNames: ['version', 'node'],
      registers: [registry],
      collect() {
        const { agent } = scrape();
        this.reset();
        this.set({ version: agent.version, node: agent.nodeName }, 1);
      },
    });
  },
};
