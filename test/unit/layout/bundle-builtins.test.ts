// The shipped bundle (dist/bundle, scripts/bundle.mjs) loads Node's own modules with require(),
// never as ES modules: an ES import of a builtin reads all its exports, and lazy ones load whole
// subsystems (node:http's WebSocket getter loads undici, http2 and worker_threads: 13.7 MB of RSS
// on Node 24). node:module is the one import: the banner's createRequire makes require().
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const BUNDLE = resolve(import.meta.dirname, '../../../dist/bundle');
const builtins = new Set(builtinModules.flatMap((m) => [m, `node:${m}`]));

/** Module specifiers of a file's static imports and re-exports and its dynamic import()s. */
export function esImports(text: string): string[] {
  const re = /(?:\bfrom|\bimport)\s*["']([^"']+)["']|\bimport\s*\(\s*["']([^"']+)["']\s*\)/g;
  return [...text.matchAll(re)].map((m) => (m[1] ?? m[2])!);
}

describe('the shipped bundle', () => {
  it('finds ES imports in minified and plain output (the check itself)', () => {
    const text = `import{createServer as a}from"node:http";import"node:fs";export*from"./x.js";const z=await import("node:zlib");import { b } from 'os'`;
    expect(esImports(text)).toEqual(['node:http', 'node:fs', './x.js', 'node:zlib', 'os']);
  });

  it('imports no Node builtin as an ES module but node:module', () => {
    expect(existsSync(BUNDLE), `${BUNDLE} is missing: npm run build`).toBe(true);
    const files = readdirSync(BUNDLE).filter((n) => n.endsWith('.js'));
    expect(files).toContain('main.js');
    const found: string[] = [];
    for (const f of files) {
      for (const spec of esImports(readFileSync(join(BUNDLE, f), 'utf8'))) {
        if (builtins.has(spec) && spec !== 'node:module') found.push(`${f}: ${spec}`);
      }
    }
    expect(found).toEqual([]);
  });
});
