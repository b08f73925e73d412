// clbprobe_build_info: which clbprobe runs on which node.
import { label, plain } from '../../export/family.js';
import type { Collector } from './collector.js';

export interface BuildInfoPart {
  nodeName: string;
  version: string;
}

export const buildInfo: Collector<BuildInfoPart> = {
  families: [
    plain<BuildInfoPart, BuildInfoPart>({
      name: 'clbprobe_build_info',
      help: 'Always 1; the labels say which clbprobe runs on which node.',
      type: 'gauge',
      labelNames: ['version', 'node'],
      items: (s) => [s],
      key: (s) => `${s.version}\0${s.nodeName}`,
      labels: (s) => `${label('version', s.version)},${label('node', s.nodeName)}`,
      value: () => 1,
    }),
  ],
  empty: () => ({ nodeName: '', version: '' }),
  filler: () => (a) => ({ nodeName: a.nodeName, version: a.version }),
};
