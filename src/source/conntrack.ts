// The conntrack table (ctnetlink; `conntrack -L` text in a bundle); the agent follows events and records reads here.
import { once } from 'node:events';
import { createWriteStream, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { BUNDLE_FILES } from '../bundle/names.js';
import { parseConntrackText } from '../bundle/parse-conntrack.js';
import { ms, runToFile } from '../bundle/writer.js';
import { errText } from '../errors.js';
import { dumpConntrack, malformedNote, readConntrack, SummaryCounter } from '../kernel/conntrack/dump.js';
import { formatConntrack } from '../kernel/conntrack/format.js';
import { fromBundleFile, readerOf, type SourceDef } from './contract.js';
import type { NodeSnapshot } from './node-snapshot.js';

type ConntrackValue = NonNullable<NodeSnapshot['conntrack']>;

export const conntrack: SourceDef<ConntrackValue> = {
  name: 'conntrack',
  key: 'conntrack',
  streamedByAgent: true,
  live(opts) {
    return readerOf(conntrack, async () => {
      const r = await readConntrack({
        ...(opts.netns ? { netns: opts.netns } : {}),
        ...(opts.conntrackEntries ? { entries: true } : {}),
        ...(opts.conntrackFilter ? { filter: opts.conntrackFilter } : {}),
      });
      if (!r.summary) return { state: 'down', reason: r.status.reason ?? 'unreadable' };
      const value = { summary: r.summary, ...(r.entries ? { entries: r.entries } : {}) };
      return { state: 'up', value, ...(r.status.reason ? { note: r.status.reason } : {}) };
    });
  },
  /** Our ctnetlink reader, in `conntrack -L -o extended,id` text; the conntrack tool if the reader fails. */
  async collect(writer) {
    const path = join(writer.out, BUNDLE_FILES.conntrack);
    const t0 = performance.now();
    const out = createWriteStream(path);
    // Opened before the dump, so the removal below cannot race the stream's own open.
    await once(out, 'ready');
    try {
      const res = await dumpConntrack(
        async (batch) => {
          const text = batch.map((e) => formatConntrack(e, { extended: true, id: true })).join('\n');
          if (!out.write(`${text}\n`)) await once(out, 'drain');
        },
        writer.netns ? { netns: writer.netns } : {},
      );
      out.end();
      await once(out, 'finish');
      const skipped = malformedNote(res);
      writer.add({
        file: BUNDLE_FILES.conntrack,
        command: 'clbprobe conntrack reader (ctnetlink dump), printed as conntrack -L -o extended,id',
        exitStatus: 0,
        durationMs: ms(t0),
        size: statSync(path).size,
        ...(skipped ? { error: skipped } : {}),
      });
    } catch (e) {
      out.destroy();
      // A partial (or empty) file would read as a complete table: only the fallback's output may stay.
      rmSync(path, { force: true });
      const why = errText(e);
      const entry = await runToFile(
        path,
        BUNDLE_FILES.conntrack,
        writer.inNs(['conntrack', '-L', '-o', 'extended,id']),
        writer.timeoutMs,
      );
      writer.add({
        ...entry,
        error: `clbprobe conntrack reader failed (${why}); ${entry.error ?? 'conntrack -L used instead'}`,
      });
    }
  },
  fromBundle: (b) =>
    fromBundleFile(b, BUNDLE_FILES.conntrack, (text, path) => {
      const { entries, warnings } = parseConntrackText(text, path);
      const counter = new SummaryCounter();
      for (const e of entries) counter.add(e);
      return { state: 'up', value: { summary: counter.summary, entries }, warnings };
    }),
};
