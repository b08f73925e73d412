// Child started by lookup-netns.ts inside another network namespace: names as JSON on stdin, the round on stdout.

import { errText } from '../../errors.js';
import { type LookupOptions, lookupHostnames } from './lookup.js';

const MAX_INPUT = 1024 * 1024;

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (d: string) => {
  input += d;
  if (input.length > MAX_INPUT) {
    process.stderr.write(`lookup-child: input over ${MAX_INPUT} bytes\n`);
    process.exit(2);
  }
});
process.stdin.on('end', () => {
  void (async () => {
    const req = JSON.parse(input) as { names: string[]; opts: LookupOptions };
    const round = await lookupHostnames(req.names, req.opts);
    process.stdout.write(JSON.stringify(round));
  })().catch((e: unknown) => {
    process.stderr.write(`lookup-child: ${errText(e)}\n`);
    process.exit(1);
  });
});
