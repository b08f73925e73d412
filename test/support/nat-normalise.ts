// A normalised view of kube-proxy's nat table, to compare hand-written rules with what the real
// kube-proxy writes for the same Services: both sides go through iptables-save (same canonical
// match order and quoting), then
// - only KUBE-* chains and the built-in chains' jumps into them are kept;
// - hashed chain names (KUBE-SVC-<16 chars>, KUBE-SEP-, KUBE-FW-, KUBE-XLB-, KUBE-EXT-, KUBE-SVL-)
//   are renamed after what they serve: the "namespace/name:port" their rules name in comments
//   (and, for an endpoint chain, its DNAT destination), so that hashes do not matter;
// - counters and quotes are dropped, and lines are sorted (kube-proxy reorders KUBE-SERVICES
//   from sync to sync, and order is not what this comparison is about).
// `ignoreServices` drops the chains and rules of Services one side does not have (the API
// server's own default/kubernetes).

const HASHED = /^KUBE-(SVC|SEP|FW|XLB|EXT|SVL)-[A-Z0-9]{16}$/;
const SVC_COMMENT = /--comment "?([\w.-]+\/[\w.-]+:[\w-]*)/;

/** The *nat section of iptables-save output, as lines (counters and quotes kept). */
function natLines(save: string): string[] {
  const out: string[] = [];
  let inNat = false;
  for (const line of save.split('\n')) {
    if (line.startsWith('*')) inNat = line === '*nat';
    else if (inNat && (line.startsWith(':') || line.startsWith('-A '))) out.push(line);
  }
  return out;
}

function chainOf(rule: string): string {
  return rule.split(' ')[1] ?? '';
}

function jumpOf(rule: string): string | undefined {
  return / -[jg] (\S+)/.exec(rule)?.[1];
}

export interface NormaliseOptions {
  /** "namespace/name" of Services whose rules are left out. */
  ignoreServices?: string[];
}

/** Sorted normalised lines of the nat table in `save` (iptables-save output). */
export function normaliseNat(save: string, opts: NormaliseOptions = {}): string[] {
  const lines = natLines(save);
  const rules = lines.filter((l) => l.startsWith('-A '));
  // Name each hashed chain after the Service port its rules (or the rules jumping to it) mention.
  const label = new Map<string, string>();
  const serviceOf = (chain: string): string | undefined => {
    for (const r of rules) {
      if (chainOf(r) === chain || jumpOf(r) === chain) {
        const m = SVC_COMMENT.exec(r);
        if (m) return m[1];
      }
    }
    return undefined;
  };
  for (const l of lines) {
    const chain = l.startsWith(':') ? l.slice(1).split(' ')[0]! : chainOf(l);
    if (!HASHED.test(chain) || label.has(chain)) continue;
    const kind = chain.split('-')[1]!;
    let name = `KUBE-${kind}-{${serviceOf(chain) ?? '?'}}`;
    if (kind === 'SEP') {
      const dnat = rules.find((r) => chainOf(r) === chain && r.includes('--to-destination'));
      name = `KUBE-SEP-{${serviceOf(chain) ?? '?'} ${/--to-destination (\S+)/.exec(dnat ?? '')?.[1] ?? '?'}}`;
    }
    label.set(chain, name);
  }
  const ignored = new Set(opts.ignoreServices ?? []);
  const isIgnored = (text: string): boolean => {
    const m = /\{([\w.-]+\/[\w.-]+):/.exec(text) ?? /--comment "?([\w.-]+\/[\w.-]+):/.exec(text);
    return m !== null && ignored.has(m[1]!);
  };
  const rename = (text: string): string =>
    text.replace(/KUBE-(SVC|SEP|FW|XLB|EXT|SVL)-[A-Z0-9]{16}\b/g, (c) => label.get(c) ?? c);
  const out: string[] = [];
  for (const l of lines) {
    if (l.startsWith(':')) {
      const chain = l.slice(1).split(' ')[0]!;
      if (!chain.startsWith('KUBE-')) continue;
      out.push(`:${rename(chain)}`);
      continue;
    }
    const chain = chainOf(l);
    const jump = jumpOf(l) ?? '';
    if (!chain.startsWith('KUBE-') && !jump.startsWith('KUBE-')) continue;
    out.push(rename(l).replace(/"/g, '').replace(/\s+/g, ' ').trim());
  }
  return [...new Set(out.filter((l) => !isIgnored(l)))].sort();
}

/** Lines only in `real` (+) and only in `hand` (-); empty when they match. */
export function natDiff(hand: string, real: string, opts: NormaliseOptions = {}): string[] {
  const a = normaliseNat(hand, opts);
  const b = normaliseNat(real, opts);
  const inA = new Set(a);
  const inB = new Set(b);
  return [...b.filter((l) => !inA.has(l)).map((l) => `+ ${l}`), ...a.filter((l) => !inB.has(l)).map((l) => `- ${l}`)];
}
