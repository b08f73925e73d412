// Bundles the compiled CLI (dist/src/cli/main.js) into dist/bundle/, the agent as shipped:
// the DaemonSet and the image start dist/bundle/main.js.
//
// Why: V8 keeps every loaded module's source and metadata for the process's life. tsc's output
// is ~175 modules plus the dependencies' files (js-yaml's ESM build alone is a 208 kB source
// string); one minified bundle holds the same code in a fraction of the heap: 2.2 MB less live
// heap at 5,000 Services (bench/agent.ts, heap after the memory reducer, 34.0 -> 31.8 MB).
// Dynamic imports stay chunks of their own (code splitting), so what a command does not use
// (the API client of `evidence --all-nodes`, the HTML report) is never loaded by the agent.
// lookup-child.js is an entry of its own: the DNS lookups inside another network namespace
// (src/cluster/dns/lookup-netns.ts) run it as a child process, next to the chunk that spawns it.

import { rmSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { build } from 'esbuild';

/**
 * Node's own modules are loaded with require(), not as ES modules. Importing a builtin as an ES
 * module reads every export to build its namespace, and some exports are lazy getters that load
 * whole subsystems: `node:http`'s WebSocket, CloseEvent and MessageEvent load undici (a 760 kB
 * source) and with it http2, worker_threads and the web streams; `node:tls`'s rootCertificates
 * parses the root store, `node:crypto`'s webcrypto loads WebCrypto. On Node 24, `import 'node:http'`
 * alone costs a bare process 13.7 MB of RSS and 2.4 MB of heap more than require('node:http')
 * (62.2 against 48.5 MB). Through require(), esbuild reads an export only where the code uses it.
 * node:module stays an import: the banner's createRequire is what require() is.
 */
const builtins = new Set(builtinModules.flatMap((m) => [m, `node:${m}`]));
const requireBuiltins = {
  name: 'require-builtins',
  setup(b) {
    b.onResolve({ filter: /^[a-z_:/]+$/ }, (args) => {
      if (!builtins.has(args.path) || args.path === 'node:module' || args.path === 'module') return undefined;
      // The wrapper's own require() is the real one (external: the banner's require at run time).
      if (args.namespace === 'builtin-require') return { path: args.path, external: true };
      return { path: args.path, namespace: 'builtin-require' };
    });
    b.onLoad({ filter: /.*/, namespace: 'builtin-require' }, (args) => ({
      contents: `module.exports = require(${JSON.stringify(args.path)});`,
      loader: 'js',
    }));
  },
};

const outdir = 'dist/bundle';
rmSync(outdir, { recursive: true, force: true });
await build({
  entryPoints: ['dist/src/cli/main.js', 'dist/src/cluster/dns/lookup-child.js'],
  outdir,
  entryNames: '[name]',
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  minify: true,
  // The CommonJS dependencies (pino, prom-client, commander) call require(); an ESM bundle has
  // no require of its own.
  banner: {
    js: "import { createRequire as __clbprobeRequire } from 'node:module'; const require = __clbprobeRequire(import.meta.url);",
  },
  legalComments: 'eof',
  logLevel: 'warning',
  plugins: [requireBuiltins],
});
