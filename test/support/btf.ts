// Reads the BTF (BPF Type Format) of a compiled eBPF object: the .BTF section
// clang writes next to the program, which the kernel itself uses to check map
// key and value types. Tests compare the TypeScript side's hand-written byte
// layouts against it, so a change to a C struct fails a test instead of
// silently misreading a map. Format: the kernel's Documentation/bpf/btf.rst
// (header, type section, string section, all little-endian here).
import { readFileSync } from 'node:fs';

const BTF_MAGIC = 0xeb9f;

const KIND = {
  INT: 1,
  PTR: 2,
  ARRAY: 3,
  STRUCT: 4,
  UNION: 5,
  ENUM: 6,
  FWD: 7,
  TYPEDEF: 8,
  VOLATILE: 9,
  CONST: 10,
  RESTRICT: 11,
  FUNC: 12,
  FUNC_PROTO: 13,
  VAR: 14,
  DATASEC: 15,
  FLOAT: 16,
  DECL_TAG: 17,
  TYPE_TAG: 18,
  ENUM64: 19,
} as const;

export interface BtfMember {
  name: string;
  type: number;
  /** Bit offset in the struct. */
  bitOffset: number;
}

export interface BtfType {
  id: number;
  kind: number;
  name: string;
  /** size (INT, STRUCT, UNION, ENUM, DATASEC, FLOAT) or referenced type id (PTR, TYPEDEF, VAR...). */
  sizeOrType: number;
  members: BtfMember[];
  /** ARRAY: element type and count. */
  array?: { type: number; nelems: number };
  /** ENUM/ENUM64: name -> value. */
  values?: Map<string, number>;
  /** DATASEC: its variables. */
  vars?: { type: number; offset: number; size: number }[];
}

/** The bytes of the named section of a 64-bit little-endian ELF file. */
export function elfSection(file: Buffer, name: string): Buffer {
  if (file.readUInt32BE(0) !== 0x7f454c46 || file[4] !== 2 || file[5] !== 1)
    throw new Error('not a 64-bit little-endian ELF file');
  const shoff = Number(file.readBigUInt64LE(0x28));
  const shentsize = file.readUInt16LE(0x3a);
  const shnum = file.readUInt16LE(0x3c);
  const shstrndx = file.readUInt16LE(0x3e);
  const sh = (i: number) => {
    const o = shoff + i * shentsize;
    return {
      name: file.readUInt32LE(o),
      offset: Number(file.readBigUInt64LE(o + 0x18)),
      size: Number(file.readBigUInt64LE(o + 0x20)),
    };
  };
  const strtab = sh(shstrndx);
  for (let i = 0; i < shnum; i++) {
    const s = sh(i);
    const at = strtab.offset + s.name;
    const n = file.toString('latin1', at, file.indexOf(0, at));
    if (n === name) return file.subarray(s.offset, s.offset + s.size);
  }
  throw new Error(`no ${name} section`);
}

export class Btf {
  readonly types: BtfType[] = [];

  constructor(btf: Buffer) {
    if (btf.readUInt16LE(0) !== BTF_MAGIC) throw new Error('not BTF (magic)');
    const hdrLen = btf.readUInt32LE(4);
    const typeOff = hdrLen + btf.readUInt32LE(8);
    const typeLen = btf.readUInt32LE(12);
    const strOff = hdrLen + btf.readUInt32LE(16);
    const str = (off: number): string => btf.toString('latin1', strOff + off, btf.indexOf(0, strOff + off));
    let o = typeOff;
    const end = typeOff + typeLen;
    for (let id = 1; o < end; id++) {
      const info = btf.readUInt32LE(o + 4);
      const t: BtfType = {
        id,
        kind: (info >>> 24) & 0x1f,
        name: str(btf.readUInt32LE(o)),
        sizeOrType: btf.readUInt32LE(o + 8),
        members: [],
      };
      const vlen = info & 0xffff;
      const kindFlag = info >>> 31;
      o += 12;
      switch (t.kind) {
        case KIND.INT:
        case KIND.VAR:
        case KIND.DECL_TAG:
          o += 4;
          break;
        case KIND.ARRAY:
          t.array = { type: btf.readUInt32LE(o), nelems: btf.readUInt32LE(o + 8) };
          o += 12;
          break;
        case KIND.STRUCT:
        case KIND.UNION:
          for (let i = 0; i < vlen; i++, o += 12) {
            const off = btf.readUInt32LE(o + 8);
            t.members.push({
              name: str(btf.readUInt32LE(o)),
              type: btf.readUInt32LE(o + 4),
              bitOffset: kindFlag ? off & 0xffffff : off,
            });
          }
          break;
        case KIND.ENUM:
          t.values = new Map();
          for (let i = 0; i < vlen; i++, o += 8) t.values.set(str(btf.readUInt32LE(o)), btf.readInt32LE(o + 4));
          break;
        case KIND.ENUM64:
          t.values = new Map();
          for (let i = 0; i < vlen; i++, o += 12)
            t.values.set(str(btf.readUInt32LE(o)), btf.readUInt32LE(o + 4) + btf.readUInt32LE(o + 8) * 2 ** 32);
          break;
        case KIND.FUNC_PROTO:
          o += 8 * vlen;
          break;
        case KIND.DATASEC:
          t.vars = [];
          for (let i = 0; i < vlen; i++, o += 12)
            t.vars.push({ type: btf.readUInt32LE(o), offset: btf.readUInt32LE(o + 4), size: btf.readUInt32LE(o + 8) });
          break;
        case KIND.PTR:
        case KIND.FWD:
        case KIND.TYPEDEF:
        case KIND.VOLATILE:
        case KIND.CONST:
        case KIND.RESTRICT:
        case KIND.FUNC:
        case KIND.FLOAT:
        case KIND.TYPE_TAG:
          break;
        default:
          throw new Error(`BTF kind ${t.kind} not known (type ${id})`);
      }
      this.types[id] = t;
    }
  }

  static fromObject(path: string): Btf {
    return new Btf(elfSection(readFileSync(path), '.BTF'));
  }

  type(id: number): BtfType {
    const t = this.types[id];
    if (!t) throw new Error(`BTF type ${id} not found`);
    return t;
  }

  /** Follows typedefs and qualifiers to the type they stand for. */
  resolve(id: number): BtfType {
    let t = this.type(id);
    while (([KIND.TYPEDEF, KIND.VOLATILE, KIND.CONST, KIND.RESTRICT, KIND.TYPE_TAG] as number[]).includes(t.kind))
      t = this.type(t.sizeOrType);
    return t;
  }

  /** Size in bytes of a type. */
  size(id: number): number {
    const t = this.resolve(id);
    if (t.kind === KIND.PTR) return 8;
    if (t.kind === KIND.ARRAY) return t.array!.nelems * this.size(t.array!.type);
    return t.sizeOrType;
  }

  byName(kind: 'struct' | 'enum' | 'var', name: string): BtfType {
    const k = kind === 'struct' ? [KIND.STRUCT] : kind === 'enum' ? [KIND.ENUM, KIND.ENUM64] : [KIND.VAR];
    const found = this.types.filter((t) => t && (k as number[]).includes(t.kind) && t.name === name);
    if (found.length !== 1) throw new Error(`BTF: ${found.length} ${kind}s named ${name}`);
    return found[0]!;
  }

  /** A struct's size and each member's byte offset, size and, for arrays, element count. */
  struct(name: string): { size: number; members: Record<string, { offset: number; size: number; nelems?: number }> } {
    const t = this.byName('struct', name);
    return { size: t.sizeOrType, members: this.membersOf(t) };
  }

  membersOf(t: BtfType): Record<string, { offset: number; size: number; nelems?: number }> {
    const out: Record<string, { offset: number; size: number; nelems?: number }> = {};
    for (const m of t.members) {
      const r = this.resolve(m.type);
      out[m.name] = {
        offset: m.bitOffset / 8,
        size: this.size(m.type),
        ...(r.kind === KIND.ARRAY ? { nelems: r.array!.nelems } : {}),
      };
    }
    return out;
  }

  /** Names of the functions (programs and subprograms) the object defines. */
  functions(): string[] {
    return this.types.filter((t) => t && t.kind === KIND.FUNC).map((t) => t.name);
  }

  enumValues(name: string): Record<string, number> {
    return Object.fromEntries(this.byName('enum', name).values!);
  }

  /**
   * A global-data section (libbpf makes it an array map of one entry, named after the section):
   * its size and each variable's name, offset, size and resolved type.
   */
  section(name: string): { size: number; vars: { name: string; offset: number; size: number; type: BtfType }[] } {
    const sec = this.types.find((t) => t && t.kind === KIND.DATASEC && t.name === name);
    if (!sec) throw new Error(`BTF: no section ${name}`);
    const vars = sec.vars!.map((x) => {
      const v = this.type(x.type);
      return { name: v.name, offset: x.offset, size: x.size, type: this.resolve(v.sizeOrType) };
    });
    return { size: sec.sizeOrType, vars };
  }

  /**
   * A map defined with libbpf's __uint/__type macros in SEC(".maps"): __uint(name, n) is a pointer
   * to an array of n elements, __type(name, T) a pointer to T.
   */
  map(name: string): {
    type: number;
    maxEntries: number;
    keySize: number;
    valueSize: number;
    key: BtfType;
    value: BtfType;
  } {
    const sec = this.types.find((t) => t && t.kind === KIND.DATASEC && t.name === '.maps');
    if (!sec) throw new Error('BTF: no .maps section');
    const v = sec.vars!.map((x) => this.type(x.type)).find((t) => t.name === name);
    if (!v) throw new Error(`BTF: no map ${name}`);
    const def = this.resolve(v.sizeOrType);
    const field = (f: string): BtfType => {
      const m = def.members.find((x) => x.name === f);
      if (!m) throw new Error(`BTF: map ${name} has no ${f}`);
      const p = this.resolve(m.type);
      if (p.kind !== KIND.PTR) throw new Error(`BTF: map ${name}'s ${f} is not a pointer`);
      return this.resolve(p.sizeOrType);
    };
    const count = (f: string): number => field(f).array!.nelems;
    const key = field('key');
    const value = field('value');
    return {
      type: count('type'),
      maxEntries: count('max_entries'),
      keySize: this.size(key.id),
      valueSize: this.size(value.id),
      key,
      value,
    };
  }
}
