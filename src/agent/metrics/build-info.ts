// clbprobe_build_info: which clbprobe runs on which node.
import { families } from './collector.js';

export const buildInfo = families({
  type: 'gauge',
  name: 'clbprobe_build_info',
  help: 'Always 1; the labels say which clbprobe runs on which node.',
  labelNames: ['version', 'node'],
  samples: ({ agent }) => [[{ version: agent.version, node: agent.nodeName }, 1]],
});
