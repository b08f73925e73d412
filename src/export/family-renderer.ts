// One metric family rendered in chunks of sample lines, each kept (as text
// compressed by gzip-chunks.ts) until its samples change: with 5,000 Service
// ports most samples do not change between scrapes, and formatting ~50k series
// costs tens of ms and MBs of garbage per scrape (bench/agent.ts).
import { escapeHelp, type Family } from './family.js';
import { chunkOf, type Chunk } from './gzip-chunks.js';

const valueText = (v: number): string => (Number.isNaN(v) ? 'Nan' : v === Infinity ? '+Inf' : v === -Infinity ? '-Inf' : `${v}`);

/** Sample lines per chunk: small enough that a changed counter re-formats little, large enough to be few. */
const CHUNK_LINES = 256;

/** One scrape's samples of a family, in order (items are kept to format their labels again). */
interface Samples<T> {
  items: T[];
  groups: string[];
  keys: string[];
  values: number[];
}

interface RenderedChunk<T> extends Samples<T> {
  out: Chunk;
}

const emptySamples = <T>(): Samples<T> => ({ items: [], groups: [], keys: [], values: [] });

const prefix = <T>(s: Samples<T>, n: number): Samples<T> => ({
  items: s.items.slice(0, n),
  groups: s.groups.slice(0, n),
  keys: s.keys.slice(0, n),
  values: s.values.slice(0, n),
});

/**
 * Renders a family in chunks of CHUNK_LINES samples, reusing last scrape's chunk when its samples
 * are the same (same label sets in the same order, same values): with 5,000 Service ports most
 * samples do not change between scrapes, and formatting ~50k series costs tens of ms and MBs of
 * garbage (bench/agent.ts). What is compared is cheap: the group and key strings are the same
 * string objects from scrape to scrape.
 * Repeated label sets in one scrape add up (counters) or replace (gauges), as in prom-client. They
 * are looked for only when the label sets change (new Services, new states), and a family that has
 * any is rendered whole (rare: the agent does not produce them).
 */
export class FamilyRenderer<S, T> {
  private chunks: RenderedChunk<T>[] = [];
  private repeats = false;
  private readonly header: Chunk;
  private readonly empty: Chunk[];
  constructor(readonly f: Family<S, T>) {
    this.header = chunkOf(`# HELP ${f.name} ${escapeHelp(f.help)}\n# TYPE ${f.name} ${f.type}\n`);
    // An unlabelled counter shows 0 rather than nothing (prom-client's reset()).
    this.empty = f.type === 'counter' && f.labelNames.length === 0 ? [this.header, chunkOf(`${f.name} 0\n`)] : [this.header];
  }

  render(state: S): Chunk[] {
    const f = this.f;
    const next: (RenderedChunk<T> | Samples<T>)[] = [];
    let labelSetsSame = true;
    let old: RenderedChunk<T> | undefined = this.chunks[0];
    let n = 0; // samples in the current chunk
    let same = 0; // of them, equal to old's from the start
    let cur: Samples<T> | undefined; // the current chunk's samples, from its first difference on
    const close = () => {
      if (!cur && old && same === old.values.length) next.push(old);
      else next.push(cur ?? prefix(old ?? emptySamples<T>(), same));
      old = this.chunks[next.length];
      n = same = 0;
      cur = undefined;
    };
    // An index loop, not for-of: at 50k samples a scrape, for-of's iterator results are ~1.8 MB
    // of garbage per scrape (allocation sampling), several scavenges in every scrape.
    const items = f.items(state);
    for (let i = 0; i < items.length; i++) {
      const x = items[i]!;
      const group = f.group(x);
      if (group === null) continue;
      if (n === CHUNK_LINES) close();
      const key = f.key(x);
      const value = f.value(x);
      const sameLabels = old !== undefined && n < old.values.length && old.groups[n] === group && old.keys[n] === key;
      if (!sameLabels) labelSetsSame = false;
      n++;
      if (!cur && sameLabels && old!.values[same] === value) {
        same++;
        continue;
      }
      cur ??= prefix(old ?? emptySamples<T>(), same);
      cur.items.push(x);
      cur.groups.push(group);
      cur.keys.push(key);
      cur.values.push(value);
    }
    if (n > 0) close();
    if (!labelSetsSame || next.length !== this.chunks.length) this.repeats = hasRepeats(next);
    if (this.repeats) {
      this.chunks = [];
      return this.renderMerged(next);
    }
    this.chunks = next.map((c) => ('out' in c ? c : kept(c, chunkOf(this.lines(c.items, c.values)))));
    return this.chunks.length === 0 ? this.empty : [this.header, ...this.chunks.map((c) => c.out)];
  }

  private lines(items: T[], values: number[]): string {
    const { f } = this;
    let text = '';
    for (let i = 0; i < items.length; i++) {
      const labels = f.labels(items[i]!);
      text += `${f.name}${labels ? `{${labels}}` : ''} ${valueText(values[i]!)}\n`;
    }
    return text;
  }

  /** The whole family with repeated label sets merged: counters add up, gauges keep the last. */
  private renderMerged(all: Samples<T>[]): Chunk[] {
    const index = new Map<string, number>();
    const items: T[] = [];
    const values: number[] = [];
    for (const c of all) {
      for (let i = 0; i < c.items.length; i++) {
        const id = `${c.groups[i]}\0${c.keys[i]}`;
        const at = index.get(id);
        if (at === undefined) {
          index.set(id, values.length);
          items.push(c.items[i]!);
          values.push(c.values[i]!);
        } else values[at] = this.f.type === 'counter' ? values[at]! + c.values[i]! : c.values[i]!;
      }
    }
    return [this.header, chunkOf(this.lines(items, values))];
  }
}

/**
 * A rendered chunk as kept until its samples change: the sample lists copied at their exact size
 * (push leaves up to a third of a 256-sample list empty; ~200 chunks at 5,000 Services).
 */
function kept<T>(c: Samples<T>, out: Chunk): RenderedChunk<T> {
  return { items: c.items.slice(), groups: c.groups.slice(), keys: c.keys.slice(), values: c.values.slice(), out };
}

function hasRepeats(chunks: Samples<unknown>[]): boolean {
  const seen = new Set<string>();
  for (const c of chunks) {
    for (let i = 0; i < c.groups.length; i++) {
      const id = `${c.groups[i]}\0${c.keys[i]}`;
      if (seen.has(id)) return true;
      seen.add(id);
    }
  }
  return false;
}

