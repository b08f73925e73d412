// Network namespaces live in src/demo/netns.ts (the demo lab uses them too).
export { Netns, vethPair } from '../../src/demo/netns.js';

export const isRoot = process.getuid?.() === 0;
