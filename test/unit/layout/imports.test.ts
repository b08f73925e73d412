// The module graph of src/: no import loops (type-only imports included: a
// loop of types still ties the two files' meanings together), and every
// relative import names a file that exists.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = resolve(import.meta.dirname, '../../../src');

function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    if (statSync(p).isDirectory()) return tsFiles(p);
    return n.endsWith('.ts') && !n.endsWith('.d.ts') ? [p] : [];
  });
}

/** Relative imports and re-exports of a file, static and dynamic, resolved to .ts paths. */
export function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const out: string[] = [];
  const re =
    /(?:^|[\s;])(?:import|export)\s[^'"]*?from\s+['"](\.[^'"]+)['"]|import\(\s*['"](\.[^'"]+)['"]\s*\)|^import\s+['"](\.[^'"]+)['"]/gm;
  for (const m of text.matchAll(re)) {
    const spec = m[1] ?? m[2] ?? m[3]!;
    out.push(resolve(dirname(file), spec.replace(/\.js$/, '.ts')));
  }
  return out;
}

/** Each cycle once, as a list of files from its smallest member (Tarjan's strongly connected components). */
export function cycles(graph: Map<string, string[]>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || graph.get(v)?.includes(v)) found.push(scc.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

/**
 * The layers of src/, top to bottom: a folder imports only folders below it (and the top-level
 * helpers such as log.ts); folders on one line do not import each other. Detectors read the
 * snapshots the sources make; sources read the bundle formats, the cluster and the kernel.
 */
const LAYERS: string[][] = [
  ['cli'],
  ['demo'],
  ['remote', 'diagnose'],
  ['agent'],
  ['detect'],
  ['source'],
  ['bundle'],
  ['cluster'],
  ['capture'],
  ['kubeproxy'],
  ['kernel'],
  ['native', 'export'],
  ['model'],
];
const rank = new Map(LAYERS.flatMap((folders, i) => folders.map((f) => [f, i] as const)));

/** Whether a file in folder `from` may import one in folder `to` ('' is the top level). */
export function mayImport(from: string, to: string): boolean {
  if (from === to || to === '') return true;
  const a = rank.get(from);
  const b = rank.get(to);
  return a !== undefined && b !== undefined && b > a;
}

/** The top folder of a file under src/ ('' for the shared top-level files such as log.ts). */
const folderOf = (file: string): string => {
  const parts = relative(SRC, file).split('/');
  return parts.length > 1 ? parts[0]! : '';
};

describe('src/ import graph', () => {
  const files = tsFiles(SRC);
  const graph = new Map(files.map((f) => [f, importsOf(f)]));

  it('finds the loops it is meant to find', () => {
    const g = new Map([
      ['a', ['b']],
      ['b', ['c']],
      ['c', ['a']],
      ['d', ['a']],
    ]);
    expect(cycles(g)).toEqual([['a', 'b', 'c']]);
  });

  it('reads the layers one way', () => {
    expect(mayImport('cluster', 'kernel')).toBe(true);
    expect(mayImport('kernel', 'cluster')).toBe(false);
    expect(mayImport('bundle', 'source')).toBe(false);
    expect(mayImport('remote', 'diagnose')).toBe(false);
    expect(mayImport('model', '')).toBe(true);
    expect(mayImport('kernel', 'kubeproxy')).toBe(false);
    expect(mayImport('source', 'kubeproxy')).toBe(true);
  });

  it('every relative import names an existing file', () => {
    const missing = [...graph].flatMap(([f, deps]) =>
      deps.filter((d) => !graph.has(d)).map((d) => `${relative(SRC, f)} -> ${relative(SRC, d)}`),
    );
    expect(missing).toEqual([]);
  });

  it('imports run one way: no folder imports a layer above it, and nothing in src/ imports test/', () => {
    const wrong: string[] = [];
    for (const [f, deps] of graph) {
      const from = folderOf(f);
      for (const d of deps) {
        const to = folderOf(d);
        if (!d.startsWith(SRC) || !mayImport(from, to)) wrong.push(`${relative(SRC, f)} -> ${relative(SRC, d)}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('has no import loops', () => {
    expect(cycles(graph).map((c) => c.map((f) => relative(SRC, f)).join(' <-> '))).toEqual([]);
  });
});
