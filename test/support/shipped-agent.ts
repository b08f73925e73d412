// The agent as the DaemonSet runs it, for tests that start it on the host with a lab's own flags:
// the image's Node release (image-node.ts) with the manifest's node flags and env, running the
// shipped bundle. The test's arguments stand for the manifest's (a lab has its own listen address,
// namespace and cluster source); test/lab/agent-kube-apiserver runs the manifest's command whole.
import { existsSync } from 'node:fs';
import { agentContainer, containerEnv, hostArgv, nodeCommand } from './daemonset.js';
import { imageNode } from './image-node.js';

export interface ShippedAgent {
  /** The node binary to exec (the image's release). */
  node: string;
  /** Its arguments: the manifest's node flags, the bundle, `agent`, then the test's. */
  argv: string[];
  /** This process's env with the manifest's (MALLOC_ARENA_MAX, NODE_NAME, ...). */
  env: NodeJS.ProcessEnv;
}

export function shippedAgent(args: readonly string[], nodeName: string): ShippedAgent {
  const c = agentContainer();
  const { nodeFlags, script } = nodeCommand(hostArgv(c));
  if (!existsSync(script)) throw new Error(`${script} is missing: run npm run build first`);
  return {
    node: imageNode(),
    argv: [...nodeFlags, script, 'agent', ...args],
    env: { ...process.env, ...containerEnv(c, { 'spec.nodeName': nodeName }) },
  };
}
