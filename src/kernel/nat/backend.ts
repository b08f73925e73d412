// The xtables backend as kube-proxy's image decides it (kubernetes-sigs/iptables-wrappers): kubelet's hint chain in
// nft, then legacy, else more rule lines (nft on a tie); an unreadable backend loses; every table is checked.
import { eachLine } from './lines.js';
import type { BackendChoice, BackendEvidence, XtablesBackend } from './types.js';

export interface BackendOutput {
  /** The iptables-save and ip6tables-save outputs (text or bytes) of this backend that could be read. */
  texts: (string | Uint8Array)[];
  /** Why (some of) this backend could not be read. */
  error?: string;
}

const KUBELET_CHAINS = [':KUBE-IPTABLES-HINT', ':KUBE-KUBELET-CANARY'].map((c) => Buffer.from(c));
const RULE_LINE = /^(?:\[\d+:\d+\]\s+)?-/;
const KUBE = Buffer.from('KUBE-');
/** What \s matches in one byte (a newline ends the line). */
const SPACE = new Set([0x20, 0x09, 0x0a, 0x0b, 0x0c, 0x0d]);

/** Counts what chooseBackend's evidence reports, a line at a time (the agent sees each output only so). */
export class BackendCounter {
  ruleLines = 0;
  kubeRuleLines = 0;
  kubeletChains = false;
  /** The next 'KUBE-' at or after a line's start in `kubeIn`: found once per occurrence, not once per line. */
  private kube = -2;
  private kubeIn: Buffer | undefined;

  /** One line, bytes [start, end) of buf; `terminated`: a '\n' followed it. */
  line(buf: Buffer, start: number, end: number, terminated: boolean): void {
    const first = buf[start];
    if (first === 0x3a /* : */ && !this.kubeletChains) {
      this.kubeletChains = KUBELET_CHAINS.some(
        (c) =>
          end - start >= c.length &&
          buf.compare(c, 0, c.length, start, start + c.length) === 0 &&
          (start + c.length < end ? SPACE.has(buf[start + c.length]!) : terminated),
      );
    }
    if (first !== 0x2d /* - */ && (first !== 0x5b /* [ */ || !RULE_LINE.test(buf.toString('latin1', start, end))))
      return;
    this.ruleLines++;
    if (buf !== this.kubeIn) {
      this.kubeIn = buf;
      this.kube = -2;
    }
    if (this.kube !== -1 && this.kube < start) this.kube = buf.indexOf(KUBE, start);
    if (this.kube >= 0 && this.kube + KUBE.length <= end) this.kubeRuleLines++;
  }

  evidence(error?: string): BackendEvidence {
    return {
      ruleLines: this.ruleLines,
      kubeRuleLines: this.kubeRuleLines,
      kubeletChains: this.kubeletChains,
      ...(error ? { error } : {}),
    };
  }
}

/** What the choice needs of one backend: its outputs' counts, and whether any of its outputs could be read. */
export interface BackendSide {
  evidence: BackendEvidence;
  /** At least one of its save commands ran. */
  readable: boolean;
}

/** The choice from whole outputs (a bundle's files), counted as the reader counts them line by line. */
export function chooseBackend(legacyOut: BackendOutput, nftOut: BackendOutput): BackendChoice {
  const side = ({ texts, error }: BackendOutput): BackendSide => {
    const counter = new BackendCounter();
    for (const t of texts) {
      const buf = typeof t === 'string' ? Buffer.from(t) : Buffer.from(t.buffer, t.byteOffset, t.byteLength);
      eachLine(buf, (start, end) => counter.line(buf, start, end, end < buf.length));
    }
    return { evidence: counter.evidence(error), readable: texts.length > 0 };
  };
  return chooseBackendOf(side(legacyOut), side(nftOut));
}

export function chooseBackendOf(legacySide: BackendSide, nftSide: BackendSide): BackendChoice {
  const legacy = legacySide.evidence;
  const nft = nftSide.evidence;
  const choose = (backend: XtablesBackend, reason: string): BackendChoice => ({ backend, reason, legacy, nft });
  if (!legacySide.readable && legacy.error && nftSide.readable)
    return choose('nft', `only nft could be read (legacy: ${legacy.error})`);
  if (!nftSide.readable && nft.error && legacySide.readable)
    return choose('legacy', `only legacy could be read (nft: ${nft.error})`);
  const counts =
    `legacy ${legacy.ruleLines} rule lines (${legacy.kubeRuleLines} ` +
    `KUBE-*), nft ${nft.ruleLines} (${nft.kubeRuleLines} KUBE-*)`;
  const hint = "kubelet's KUBE-IPTABLES-HINT/KUBE-KUBELET-CANARY chain";
  if (nft.kubeletChains) return choose('nft', `${hint} is in the nft tables; ${counts}`);
  if (legacy.kubeletChains) return choose('legacy', `${hint} is in the legacy tables; ${counts}`);
  if (legacy.ruleLines > nft.ruleLines)
    return choose('legacy', `no kubelet hint chain; legacy holds more rules: ${counts}`);
  const why = nft.ruleLines > legacy.ruleLines ? 'nft holds more rules' : 'equal rule counts, nft is the default';
  return choose('nft', `no kubelet hint chain; ${why}: ${counts}`);
}
