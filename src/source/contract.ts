// The contract every node input follows for every reader: one file exporting a SourceDef plus an entry in SOURCES
// (list.ts), so the runner records all health alike and a new source gets its metrics for free.
import type { BundleFiles } from '../bundle/files.js';
import type { BundleWriter } from '../bundle/writer.js';
import type { LookupOptions } from '../cluster/dns/lookup.js';
import type { ConntrackFilter } from '../kernel/conntrack/dump.js';
import type { SourceStatus } from '../model/source-status.js';
import type { NodeSnapshot } from './node-snapshot.js';

/** The parts of a NodeSnapshot that sources fill (the rest is the snapshot's own header). */
export type NodeData = Omit<NodeSnapshot, 'takenAt' | 'hostname' | 'kernel' | 'sources'>;

/** What a source says beside its value or reason. */
interface ReadExtras {
  /** Problems with parts of the input that did not stop the read (a bad line, a missing IPv6 file). */
  warnings?: string[];
  /** Statuses of parts the source reads together and reports separately (nat reports ipset). */
  parts?: SourceStatus[];
}

/** down keeps the last value unless partial data comes along; absent is no such datapath, and no up series. */
export type ReadResult<T> =
  | ({ state: 'up'; value: T; note?: string } & ReadExtras)
  | ({ state: 'down'; reason: string; value?: T } & ReadExtras)
  | ({ state: 'absent'; reason: string } & ReadExtras)
  | { state: 'unchanged' };

/** Told by a reader that watches its input (kernel notifications) between reads. */
export interface SourceEvents {
  /** The input changed: read it again (the caller debounces). */
  changed(): void;
  /** The watch failed; the source is down until the next good read. */
  failed(reason: string): void;
}

/** One implementation of a source, as the runner calls it: live, or a bundle's files. */
export interface SourceReader<T = unknown> {
  readonly name: string;
  /** Where the value goes in a NodeSnapshot; none for values only a bundle carries (routes, sysctls). */
  readonly key?: keyof NodeData;
  /** Starts watching for changes between reads; returns how to stop. Optional: most sources are polled. */
  watch?(events: SourceEvents): () => void;
  read(): Promise<ReadResult<T>> | ReadResult<T>;
}

/** What a live reader needs to know about where it reads. */
export interface LiveOptions {
  /** Path of a network namespace to read instead of ours (labs, tests). */
  netns?: string;
  /** conntrack: keep the entries (else only the summary) and which. */
  conntrackEntries?: boolean;
  conntrackFilter?: ConntrackFilter;
  /** dns: the hostname-only LB names the cluster view publishes now (none: the source is absent). */
  lbHostnames?: () => readonly string[];
  /** dns: resolv.conf and bounds of the lookups. */
  dnsLookup?: LookupOptions;
  /** nat: keep only what detection needs of the rules (the agent), not the parsed rules (snapshot, bundles). */
  natFactsOnly?: boolean;
}

/** A source: live read, `collect` write and bundle read, each optional (routes, sysctls only collected). */
export interface SourceDef<T = unknown> {
  readonly name: string;
  readonly key?: keyof NodeData;
  /** The value decides which addresses the agent follows, so a change rebuilds its Service index. */
  readonly indexes?: boolean;
  /** The live agent keeps this input itself from an event stream (conntrack), and does not poll it. */
  readonly streamedByAgent?: boolean;
  /** Its input depends on the cluster view (LB names to resolve): the agent reads it again when the view changes. */
  readonly followsCluster?: boolean;
  live?(opts: LiveOptions): SourceReader<T>;
  /** Writes this source's files into a bundle; a failure is recorded in the manifest, never thrown. */
  collect?(w: BundleWriter): Promise<void>;
  /** Reads this source's files of a bundle; may throw (the runner turns it into down + a warning). */
  fromBundle?(b: BundleFiles): ReadResult<T>;
}

/** A reader under its source's name and key, so statuses and snapshot fields agree. */
export function readerOf<T>(
  def: SourceDef<T>,
  read: NoInfer<SourceReader<T>['read']>,
  watch?: NoInfer<SourceReader<T>['watch']>,
): SourceReader<T> {
  return { name: def.name, ...(def.key ? { key: def.key } : {}), read, ...(watch ? { watch } : {}) };
}

/** The bundle implementation of a source: its files, through the same runner as a live read. */
export function bundleReader<T>(def: SourceDef<T>, files: BundleFiles): SourceReader<T> {
  return readerOf(def, () => def.fromBundle!(files));
}

/** A source's one bundle file through its parser; down, with the manifest's word, when the file is missing. */
export function fromBundleFile<T>(
  files: BundleFiles,
  file: string,
  parse: (text: string, path: string) => ReadResult<T>,
): ReadResult<T> {
  return files.has(file)
    ? parse(files.text(file), files.path(file))
    : { state: 'down', reason: files.whyMissing(file) };
}
