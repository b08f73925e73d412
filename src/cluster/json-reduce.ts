// Incremental JSON reader that builds only what a Shape names, so the heap holds what the view keeps.
// Each list/watch object (a "unit") is bounded: over its caps it becomes a SkippedObject; past maxUnitBytes it fails.

/** What of a unit is recorded even when it is skipped: what names it, and its version. */
export type UnitId = 'name' | 'namespace' | 'resourceVersion';

/**
 * What is built of a value. value: a scalar as JSON.parse gives it, `id` records it on the unit too; fields: only the
 * named fields of an object; map: every field of an object, each as `each`; each: every element of an array;
 * any: everything, as JSON.parse gives it (no caps; the unit's raw bound still holds).
 */
export type Shape =
  | { readonly kind: 'value'; readonly id?: UnitId }
  | { readonly kind: 'fields'; readonly fields: ReadonlyMap<string, Shape> }
  | { readonly kind: 'map' | 'each'; readonly each: Shape }
  | { readonly kind: 'any' }
  | UnitShape;

/** One object of a list or watch, bounded on its own and reported by `label` when skipped. */
export interface UnitShape {
  readonly kind: 'unit';
  readonly label: string;
  readonly maxKeptBytes: number;
  readonly of: Shape;
}

export const VALUE: Shape = { kind: 'value' };
export const ANY: Shape = { kind: 'any' };
export const idValue = (id: UnitId): Shape => ({ kind: 'value', id });
export const fields = (f: Record<string, Shape>): Shape => ({ kind: 'fields', fields: new Map(Object.entries(f)) });
export const mapOf = (each: Shape): Shape => ({ kind: 'map', each });
export const each = (e: Shape): Shape => ({ kind: 'each', each: e });
export const unit = (label: string, maxKeptBytes: number, of: Shape): UnitShape => ({
  kind: 'unit',
  label,
  maxKeptBytes,
  of,
});

export interface ReduceLimits {
  /** Bytes of each kept string (its JSON text) and object key. */
  maxValueBytes: number;
  /** Raw bytes of one unit, and of each top-level value of a sequence. */
  maxUnitBytes: number;
}

/** An object left out: what it is, its size in the answer, and why. */
export class SkippedObject {
  constructor(
    readonly kind: string,
    readonly bytes: number,
    readonly reason: string,
    readonly namespace?: string,
    readonly name?: string,
    readonly resourceVersion?: string,
  ) {}

  /** "Service attacker/fat-1", "Node node-a", or the kind alone when no name was read. */
  get label(): string {
    return this.name === undefined ? `${this.kind} (name not read)` : objectLabel(this.kind, this.namespace, this.name);
  }
}

const objectLabel = (kind: string, namespace: string | undefined, name: string): string =>
  `${kind} ${namespace !== undefined ? `${namespace}/` : ''}${name}`;

/** Input that is not JSON, is cut short, or a unit past its raw bound. */
export class JsonStreamError extends Error {
  constructor(
    message: string,
    readonly offset: number,
  ) {
    super(message);
    this.name = 'JsonStreamError';
  }
}

/** Bytes a kept value or container counts besides its text: V8's object and pointer. */
const VALUE_OVERHEAD = 16;
/** Deeper than any object of the kinds read (managedFields is ~15); deeper input is not Kubernetes'. */
const MAX_DEPTH = 256;
/** A number or literal longer than this is not one. */
const MAX_TOKEN = 64;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

enum Expect {
  Value,
  ValueOrClose,
  Key,
  KeyOrClose,
  Colon,
  CommaOrClose,
}

interface Unit {
  readonly shape: UnitShape;
  readonly start: number;
  /** The stack depth of the unit's own container. */
  readonly depth: number;
  kept: number;
  over?: string;
  name?: string;
  namespace?: string;
  resourceVersion?: string;
}

interface Frame {
  readonly array: boolean;
  /** Shape of the children; undefined: children are scanned past. */
  readonly children: Shape | undefined;
  /** What is built; undefined when nothing of this container is kept. */
  readonly value: Record<string, unknown> | unknown[] | undefined;
  readonly unit: Unit | undefined;
  /** The unit this container is the root of. */
  readonly own: Unit | undefined;
  key: string | undefined;
  index: number;
}

/** A string being read (one object, reused): its length always; when collected, its bytes from earlier chunks. */
interface StringRead {
  isKey: boolean;
  collect: boolean;
  cap: number;
  /** Copies of its bytes in earlier chunks: one within a chunk is decoded from the chunk. */
  pieces: Buffer[];
  bytes: number;
  escaped: boolean;
  /** An escape or a control character was seen: JSON.parse decodes (and checks) it. */
  special: boolean;
}

/** Bytes of a string scanned past checked one by one before a native search (memchr) takes over. */
const SHORT = 64;

export class JsonReducer {
  private readonly frames: Frame[] = [];
  private expect = Expect.Value;
  private offset = 0;
  private inString = false;
  private readonly str: StringRead = {
    isKey: false,
    collect: false,
    cap: 0,
    pieces: [],
    bytes: 0,
    escaped: false,
    special: false,
  };
  private token: string | undefined;
  /** Where the value being read goes, decided when its first byte is seen. */
  private slotShape: Shape | undefined;
  private slotUnit: Unit | undefined;
  private slotKeep = false;
  private topStart = -1;
  private values = 0;

  /** With `sequence`, the input is a watch stream of top-level values, each passed to `onValue`. */
  constructor(
    private readonly shape: Shape,
    private readonly limits: ReduceLimits,
    private readonly onValue: (value: unknown) => void,
    private readonly sequence = false,
  ) {}

  write(chunk: Buffer): void {
    let i = 0;
    while (i < chunk.length) {
      if (this.inString) i = this.readString(chunk, i);
      else if (this.token !== undefined) i = this.readToken(chunk, i);
      else i = this.readStructure(chunk, i);
    }
    this.offset += chunk.length;
    this.checkRawBounds();
  }

  /** The input is complete: throws if it ends inside a value. */
  end(): void {
    if (this.token !== undefined && this.frames.length === 0) this.finishToken(this.offset);
    if (this.inString || this.token !== undefined || this.frames.length > 0) {
      throw new JsonStreamError(
        `not JSON: the text ends inside a value at byte ${this.offset} (cut short?)`,
        this.offset,
      );
    }
    if (!this.sequence && this.values === 0) throw new JsonStreamError('not JSON: no value at all', this.offset);
  }

  private fail(at: number, message: string): never {
    throw new JsonStreamError(`not JSON at byte ${this.offset + at}: ${message}`, this.offset + at);
  }

  private readStructure(chunk: Buffer, i: number): number {
    const c = chunk[i]!;
    if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) return i + 1;
    const e = this.expect;
    if (e === Expect.CommaOrClose) return this.afterValue(i, c);
    if (e === Expect.Colon) {
      if (c !== 0x3a) this.fail(i, `expected ':', got ${describe(c)}`);
      this.expect = Expect.Value;
      return i + 1;
    }
    if (e === Expect.ValueOrClose && c === 0x5d) return this.close(i);
    if (e === Expect.KeyOrClose && c === 0x7d) return this.close(i);
    if (e === Expect.Value || e === Expect.ValueOrClose) return this.startValue(i, c);
    if (c !== QUOTE) this.fail(i, `expected a property name, got ${describe(c)}`);
    this.beginString(true);
    return i + 1;
  }

  private afterValue(i: number, c: number): number {
    const top = this.frames[this.frames.length - 1];
    if (!top) {
      // Only a sequence has more than one top-level value.
      if (!this.sequence) this.fail(i, `unexpected ${describe(c)} after the JSON value`);
      this.expect = Expect.Value;
      return this.startValue(i, c);
    }
    if (c === 0x2c) {
      top.index++;
      this.expect = top.array ? Expect.Value : Expect.Key;
      return i + 1;
    }
    if (c === (top.array ? 0x5d : 0x7d)) return this.close(i);
    return this.fail(i, `expected ',' or '${top.array ? ']' : '}'}', got ${describe(c)}`);
  }

  private startValue(i: number, c: number): number {
    if (this.frames.length === 0) this.topStart = this.offset + i;
    this.setSlot();
    if (c === 0x7b || c === 0x5b) return this.open(i, c === 0x5b);
    if (c === QUOTE) {
      this.beginString(false);
      return i + 1;
    }
    if (c === 0x2d || (c >= 0x30 && c <= 0x39) || c === 0x74 || c === 0x66 || c === 0x6e) {
      this.token = '';
      return i;
    }
    return this.fail(i, `expected a value, got ${describe(c)}`);
  }

  /** The shape and unit of a value starting at the current position, and whether it is built. */
  private setSlot(): void {
    const top = this.frames[this.frames.length - 1];
    this.slotShape = top ? top.children && childShape(top.children, top.key) : this.shape;
    this.slotUnit = top?.unit;
    this.slotKeep = !top || (top.value !== undefined && this.slotShape !== undefined && !top.unit?.over);
  }

  private open(i: number, array: boolean): number {
    if (this.frames.length >= MAX_DEPTH) this.fail(i, `nested deeper than ${MAX_DEPTH}`);
    let shape = this.slotShape;
    let unit = this.slotUnit;
    let own: Unit | undefined;
    if (shape?.kind === 'unit') {
      own = { shape, start: this.offset + i, depth: this.frames.length, kept: 0 };
      unit = own;
      shape = shape.of;
    }
    const keep = this.slotKeep && !unit?.over;
    if (keep) this.account(unit, 0);
    this.frames.push({
      array,
      children: shape && containerChildren(shape, array),
      value: keep ? (array ? [] : {}) : undefined,
      unit,
      own,
      key: undefined,
      index: 0,
    });
    this.expect = array ? Expect.ValueOrClose : Expect.KeyOrClose;
    return i + 1;
  }

  private close(i: number): number {
    // Only called for the kind of container open (readStructure and afterValue check).
    const frame = this.frames.pop()!;
    this.deliver(frame.own ? this.finishUnit(frame.own, this.offset + i + 1, frame.value) : frame.value);
    return i + 1;
  }

  private finishUnit(u: Unit, end: number, value: unknown): unknown {
    const bytes = end - u.start;
    if (bytes > this.limits.maxUnitBytes) this.tooLong(u);
    if (!u.over) return value;
    return new SkippedObject(u.shape.label, bytes, u.over, u.namespace, u.name, u.resourceVersion);
  }

  /** A complete value: into its parent when kept there, or to onValue at the top. */
  private deliver(value: unknown): void {
    const top = this.frames[this.frames.length - 1];
    this.expect = Expect.CommaOrClose;
    if (!top) {
      this.values++;
      this.onValue(value);
      return;
    }
    if (top.value === undefined || top.unit?.over || value === undefined) return;
    if (Array.isArray(top.value)) top.value.push(value);
    else if (top.key !== undefined) setField(top.value, top.key, value);
  }

  private beginString(isKey: boolean): void {
    const shape = isKey ? this.frames[this.frames.length - 1]?.children : this.slotShape;
    const id = !isKey && shape?.kind === 'value' ? shape.id : undefined;
    const s = this.str;
    s.isKey = isKey;
    // Keys are read where they choose a field: in followed objects.
    s.collect = isKey ? shape !== undefined : this.slotKeep || (id !== undefined && this.slotUnit !== undefined);
    s.cap = shape?.kind === 'any' ? Infinity : this.limits.maxValueBytes;
    s.pieces.length = 0;
    s.bytes = 0;
    s.escaped = false;
    s.special = false;
    this.inString = true;
  }

  /** Reads a string's bytes in this chunk: to its closing quote, or all of them. */
  private readString(chunk: Buffer, i: number): number {
    const s = this.str;
    const end = stringEnd(s, chunk, i);
    if (end < 0) {
      this.stringPiece(s, chunk, i, chunk.length);
      return chunk.length;
    }
    this.inString = false;
    const text = this.stringText(s, chunk, i, end);
    if (s.isKey) this.finishKey(s, text, this.frames[this.frames.length - 1]!);
    else this.deliver(this.stringValue(s, text, end));
    return end + 1;
  }

  private stringPiece(s: StringRead, chunk: Buffer, from: number, to: number): void {
    const room = s.cap - s.bytes;
    s.bytes += to - from;
    // Copied: the chunk's memory must not stay alive for a few bytes of it.
    if (s.collect && room > 0 && to > from) s.pieces.push(Buffer.from(chunk.subarray(from, Math.min(to, from + room))));
  }

  /** The text of a collected string within its cap (undefined otherwise), ending at chunk[end]. */
  private stringText(s: StringRead, chunk: Buffer, from: number, end: number): string | undefined {
    s.bytes += end - from;
    if (!s.collect || s.bytes > s.cap) return undefined;
    const raw =
      s.pieces.length === 0
        ? chunk.toString('utf8', from, end)
        : Buffer.concat([...s.pieces, chunk.subarray(from, end)]).toString('utf8');
    if (!s.special) return raw;
    try {
      return JSON.parse(`"${raw}"`) as string;
    } catch {
      return this.fail(
        end,
        `a ${s.isKey ? 'property name' : 'string'} is not valid JSON (a control character or a bad escape)`,
      );
    }
  }

  /** A string value's text when its slot keeps it within the caps; over the cap, its unit is skipped. */
  private stringValue(s: StringRead, text: string | undefined, at: number): string | undefined {
    if (!s.collect) return undefined;
    const unit = this.slotUnit;
    if (s.bytes > s.cap) {
      if (!unit)
        throw new JsonStreamError(
          `a string of ${s.bytes} bytes at byte ${this.offset + at}, more than the ${size(s.cap)} kept of a value`,
          this.offset + at,
        );
      unit.over ??= `${this.pathIn(unit)} is ${s.bytes} bytes, more than the ${size(s.cap)} kept of a value`;
      return undefined;
    }
    const shape = this.slotShape;
    if (unit && shape?.kind === 'value' && shape.id) unit[shape.id] = text;
    return this.kept(text, s.bytes);
  }

  /** A map's keys are kept (and counted); a followed object's key only chooses the field. */
  private finishKey(s: StringRead, text: string | undefined, top: Frame): void {
    this.expect = Expect.Colon;
    top.key = undefined;
    if (!s.collect) return;
    const kept = top.children?.kind === 'map' && top.value !== undefined;
    if (s.bytes > s.cap) {
      if (kept && top.unit)
        top.unit.over ??=
          `${this.pathIn(top.unit, this.frames.length - 1)} has a key ` +
          `of ${s.bytes} bytes, more than the ${size(s.cap)} kept of one`;
      return;
    }
    top.key = text;
    if (kept) this.account(top.unit, s.bytes);
  }

  private readToken(chunk: Buffer, i: number): number {
    let end = i;
    while (end < chunk.length && isTokenByte(chunk[end]!)) end++;
    this.token += chunk.toString('latin1', i, end);
    if (this.token!.length > MAX_TOKEN) this.fail(i, 'a number or literal longer than 64 characters');
    if (end < chunk.length) this.finishToken(this.offset + end);
    return end;
  }

  private finishToken(at: number): void {
    const text = this.token!;
    this.token = undefined;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      throw new JsonStreamError(`not JSON at byte ${at}: ${JSON.stringify(text.slice(0, 20))} is not a value`, at);
    }
    this.deliver(this.kept(value, 0));
  }

  /** The value read when its slot keeps it, counted with its `bytes` against its unit; else undefined. */
  private kept<T>(value: T, bytes: number): T | undefined {
    if (!this.slotKeep || this.slotUnit?.over) return undefined;
    this.account(this.slotUnit, bytes);
    return value;
  }

  private account(u: Unit | undefined, bytes: number): void {
    if (!u || u.over) return;
    u.kept += bytes + VALUE_OVERHEAD;
    if (u.kept > u.shape.maxKeptBytes) u.over = `the fields read of it are more than ${size(u.shape.maxKeptBytes)}`;
  }

  /** "metadata.annotations["x/y"]": where the current value (or the container at depth `to`) is, inside unit `u`. */
  private pathIn(u: Unit, to = this.frames.length): string {
    let path = '';
    for (let d = u.depth; d < to; d++) {
      const f = this.frames[d]!;
      if (f.array) path += `[${f.index}]`;
      else
        path += /^[A-Za-z_][A-Za-z0-9_]*$/.test(f.key ?? '')
          ? `${path ? '.' : ''}${f.key}`
          : `[${JSON.stringify(f.key ?? '?')}]`;
    }
    return path || 'the object';
  }

  private tooLong(u: Unit): never {
    const what = u.name !== undefined ? objectLabel(u.shape.label, u.namespace, u.name) : `a ${u.shape.label}`;
    throw new JsonStreamError(
      `${what} at byte ${u.start} is longer than ` +
        `${size(this.limits.maxUnitBytes)}: not an object the API server stores`,
      this.offset,
    );
  }

  /** A unit, or a top-level value of a sequence, longer than maxUnitBytes ends the answer. */
  private checkRawBounds(): void {
    const max = this.limits.maxUnitBytes;
    const outer = this.frames.find((f) => f.own)?.own;
    if (outer && this.offset - outer.start > max) this.tooLong(outer);
    const open = this.frames.length > 0 || this.inString || this.token !== undefined;
    if (this.sequence && open && this.offset - this.topStart > max) {
      throw new JsonStreamError(`the value at byte ${this.topStart} is longer than ${size(max)}`, this.offset);
    }
  }
}

/** The one JSON value of `text`, reduced to `shape`. Throws JsonStreamError. */
export function reduceText(text: string | Buffer, shape: Shape, limits: ReduceLimits): unknown {
  let value: unknown;
  const reader = new JsonReducer(shape, limits, (v) => (value = v));
  reader.write(typeof text === 'string' ? Buffer.from(text) : text);
  reader.end();
  return value;
}

/** The shape of a child of a container whose children have `shape`, which containerChildren fitted to it. */
function childShape(shape: Shape, key: string | undefined): Shape | undefined {
  if (shape.kind === 'any') return shape;
  if (shape.kind === 'each') return shape.each;
  if (key === undefined) return undefined;
  return shape.kind === 'map' ? shape.each : shape.kind === 'fields' ? shape.fields.get(key) : undefined;
}

/** The children's shape when it fits the container; a mismatch keeps it empty so parsers report the wrong type. */
function containerChildren(shape: Shape, array: boolean): Shape | undefined {
  if (shape.kind === 'any') return shape;
  if (array) return shape.kind === 'each' ? shape : undefined;
  return shape.kind === 'fields' || shape.kind === 'map' ? shape : undefined;
}

/** Index of the closing quote from `from`, or -1 past the chunk; past a string's cap a native search jumps ahead. */
function stringEnd(s: StringRead, chunk: Buffer, from: number): number {
  const len = chunk.length;
  const precise = s.collect ? from + Math.max(0, s.cap - s.bytes) + 1 : from;
  let k = from;
  let searched = from;
  // The next quote found natively, reused until the scan passes it (-1: none in this chunk).
  let quote = -2;
  if (s.escaped) {
    s.escaped = false;
    k++;
  }
  while (k < len) {
    const c = chunk[k]!;
    if (c === QUOTE) return k;
    if (c === BACKSLASH) {
      s.special = true;
      k += 2;
      if (k > len) s.escaped = true;
      continue;
    }
    if (c < 0x20) s.special = true;
    k++;
    if (k >= precise && k - searched >= SHORT) {
      if (quote !== -1 && quote < k) quote = chunk.indexOf(QUOTE, k);
      const stop = quote < 0 ? len : quote;
      const b = chunk.subarray(k, stop).indexOf(BACKSLASH);
      k = b < 0 ? stop : k + b;
      searched = k;
    }
  }
  return -1;
}

/** Own property even for "__proto__", as JSON.parse does. */
function setField(o: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__')
    Object.defineProperty(o, key, { value, enumerable: true, writable: true, configurable: true });
  else o[key] = value;
}

function isTokenByte(c: number): boolean {
  return (
    (c >= 0x30 && c <= 0x39) ||
    (c >= 0x61 && c <= 0x7a) ||
    (c >= 0x41 && c <= 0x5a) ||
    c === 0x2b ||
    c === 0x2d ||
    c === 0x2e
  );
}

function describe(c: number): string {
  return c >= 0x20 && c < 0x7f ? `'${String.fromCharCode(c)}'` : `byte 0x${c.toString(16).padStart(2, '0')}`;
}

/** "64 bytes", "16 KiB", "16 MiB". */
export function size(n: number): string {
  if (n < 1024) return `${n} bytes`;
  return n < 1 << 20 ? `${+(n / 1024).toFixed(1)} KiB` : `${+(n / 2 ** 20).toFixed(2)} MiB`;
}
