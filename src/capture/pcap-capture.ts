// Evidence capture: packets matching a filter, written to a standard .pcap file, bounded in time and file size.
import { closeSync, unlinkSync } from 'node:fs';
import { PCAP_META_WORDS, pcapAddon } from '../native/pcap.js';
import { captureError } from './errors.js';
import { createCaptureFile } from './output-file.js';
import { type PcapBatch, PcapReader } from './pcap-reader.js';

export interface CaptureOptions {
  ifname: string;
  /** Where to write the .pcap file: created, never an existing file and never through a symlink. */
  file: string;
  durationS: number;
  /** Upper bound of the file size, header included; packets that would exceed it are not written. */
  maxBytes: number;
  /** Bytes kept per packet (default 65535: whole packets). */
  snaplen?: number;
  netnsPath?: string;
  signal?: AbortSignal;
}

export interface CaptureResult {
  file: string;
  packets: number;
  bytes: number;
  stoppedBy: 'time' | 'size' | 'signal' | 'error';
  /** With stoppedBy 'error': why the capture could not go on (e.g. its interface was deleted). */
  error?: string;
  /** Matching packets the kernel dropped (buffer full) plus those not written because of maxBytes. */
  dropped: number;
}

/** pcap file header; each record adds a 16-byte header. */
const FILE_HEADER = 24;
const RECORD_HEADER = 16;

/** Captures packets matching `filter` (pcap syntax) into opts.file, which it creates. */
export async function capture(filter: string, opts: CaptureOptions): Promise<CaptureResult> {
  if (!(opts.durationS > 0) || !(opts.maxBytes >= FILE_HEADER)) {
    throw new Error(`capture: durationS must be > 0 and maxBytes >= ${FILE_HEADER}`);
  }
  const addon = pcapAddon();
  const fd = createCaptureFile(opts.file);
  let size = FILE_HEADER;
  let packets = 0;
  let skipped = 0;
  let full = false;
  const write = (b: PcapBatch) => {
    let n = 0;
    for (; !full && n < b.count; n++) {
      const next = size + RECORD_HEADER + b.meta[n * PCAP_META_WORDS + 2]!;
      full = next > opts.maxBytes;
      if (full) break;
      size = next;
    }
    if (n > 0) addon.pcapDumpWrite(dump, b.data, b.meta, 0, n);
    packets += n;
    skipped += b.count - n;
    if (full) finish('size');
  };
  const snaplen = opts.snaplen ?? 65535;
  const abandon = (e: unknown): never => {
    closeSync(fd);
    unlinkSync(opts.file);
    throw captureError(e, 'pcap', `evidence capture on ${opts.ifname}`);
  };
  let reader: PcapReader;
  try {
    reader = new PcapReader(
      opts.ifname,
      // Immediate: evidence is low-rate, and a short capture must not wait for blocks.
      {
        snaplen,
        bufferSize: 8 << 20,
        timeoutMs: 100,
        immediate: 1,
        netnsPath: opts.netnsPath,
        batchPackets: 256,
        batchBytes: 64 * snaplen,
        // The file holds what was captured until then; the result says why it ends early.
        onStopped: (reason) => finish('error', reason),
      },
      (b) => write(b),
    );
  } catch (e) {
    return abandon(e);
  }
  let dump: ReturnType<typeof addon.pcapDumpOpen>;
  try {
    reader.setFilter(filter);
    // libpcap opens by name: the fd's /proc link reaches the file created above, not what the name means now.
    dump = addon.pcapDumpOpen(reader.handle, `/proc/self/fd/${fd}`);
  } catch (e) {
    reader.close();
    return abandon(e);
  }
  closeSync(fd);

  let resolve!: (r: CaptureResult) => void;
  const done = new Promise<CaptureResult>((r) => (resolve = r));
  let finished = false;
  const timer = setTimeout(() => finish('time'), opts.durationS * 1000);
  const onAbort = () => finish('signal');
  opts.signal?.addEventListener('abort', onAbort, { once: true });

  function finish(why: CaptureResult['stoppedBy'], error?: string): void {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    opts.signal?.removeEventListener('abort', onAbort);
    if (!full) reader.drain();
    const kernelDropped = reader.stats().dropped;
    reader.close();
    addon.pcapDumpClose(dump);
    resolve({
      file: opts.file,
      packets,
      bytes: size,
      stoppedBy: full ? 'size' : why,
      dropped: kernelDropped + skipped,
      ...(error !== undefined && !full ? { error } : {}),
    });
  }

  if (opts.signal?.aborted) finish('signal');
  else reader.start();
  return done;
}
