// Which xtables backend (legacy or nft) kube-proxy and kubelet are using, decided
// the way kube-proxy's image decides it (kubernetes-sigs/iptables-wrappers):
//   1. a KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY chain in the nft output -> nft;
//   2. the same chains in the legacy output -> legacy (kubelet >= 1.17 makes them);
//   3. otherwise the backend with more rule lines wins, nft on a tie.
// A backend whose save commands cannot run at all loses to one that can.
// The wrapper looks only at the mangle table for nft (to be quick); we have every
// table of both backends at hand, so both are checked in full.
import { eachLine } from './lines.js';
import type { BackendChoice, BackendEvidence } from './types.js';

export interface BackendOutput {
  /** iptables-save and ip6tables-save outputs (text, or bytes as the commands printed them) of this backend that could be read. */
  texts: (string | Uint8Array)[];
  /** Why (some of) this backend could not be read. */
  error?: string;
}

const KUBELET_CHAINS = [':KUBE-IPTABLES-HINT', ':KUBE-KUBELET-CANARY'].map((c) => Buffer.from(c));
const RULE_LINE = /^(?:\[\d+:\d+\]\s+)?-/;
const KUBE = Buffer.from('KUBE-');
/** What \s matches in one byte (a newline ends the line). */
const SPACE = new Set([0x20, 0x09, 0x0a, 0x0b, 0x0c, 0x0d]);

export function backendEvidence(out: BackendOutput): BackendEvidence {
  let ruleLines = 0;
  let kubeRuleLines = 0;
  let kubeletChains = false;
  for (const t of out.texts) {
    const buf = typeof t === 'string' ? Buffer.from(t) : Buffer.from(t.buffer, t.byteOffset, t.byteLength);
    // The next 'KUBE-' at or after a line's start: found once per occurrence, not once per line.
    let kube = -2;
    eachLine(buf, (start, end) => {
      const first = buf[start];
      if (first === 0x3a /* : */ && !kubeletChains) {
        kubeletChains = KUBELET_CHAINS.some((c) => end - start >= c.length && buf.compare(c, 0, c.length, start, start + c.length) === 0 && (start + c.length < end ? SPACE.has(buf[start + c.length]!) : end < buf.length));
      }
      if (first !== 0x2d /* - */ && (first !== 0x5b /* [ */ || !RULE_LINE.test(buf.toString('latin1', start, end)))) return;
      ruleLines++;
      if (kube !== -1 && kube < start) kube = buf.indexOf(KUBE, start);
      if (kube >= 0 && kube + KUBE.length <= end) kubeRuleLines++;
    });
  }
  return { ruleLines, kubeRuleLines, kubeletChains, ...(out.error ? { error: out.error } : {}) };
}

export function chooseBackend(legacyOut: BackendOutput, nftOut: BackendOutput): BackendChoice {
  const legacy = backendEvidence(legacyOut);
  const nft = backendEvidence(nftOut);
  if (legacyOut.texts.length === 0 && legacyOut.error && nftOut.texts.length > 0) {
    return { backend: 'nft', reason: `only nft could be read (legacy: ${legacyOut.error})`, legacy, nft };
  }
  if (nftOut.texts.length === 0 && nftOut.error && legacyOut.texts.length > 0) {
    return { backend: 'legacy', reason: `only legacy could be read (nft: ${nftOut.error})`, legacy, nft };
  }
  const counts = `legacy ${legacy.ruleLines} rule lines (${legacy.kubeRuleLines} KUBE-*), nft ${nft.ruleLines} (${nft.kubeRuleLines} KUBE-*)`;
  if (nft.kubeletChains) {
    return { backend: 'nft', reason: `kubelet's KUBE-IPTABLES-HINT/KUBE-KUBELET-CANARY chain is in the nft tables; ${counts}`, legacy, nft };
  }
  if (legacy.kubeletChains) {
    return { backend: 'legacy', reason: `kubelet's KUBE-IPTABLES-HINT/KUBE-KUBELET-CANARY chain is in the legacy tables; ${counts}`, legacy, nft };
  }
  if (legacy.ruleLines > nft.ruleLines) {
    return { backend: 'legacy', reason: `no kubelet hint chain; legacy holds more rules: ${counts}`, legacy, nft };
  }
  const why = nft.ruleLines > legacy.ruleLines ? 'nft holds more rules' : 'equal rule counts, nft is the default';
  return { backend: 'nft', reason: `no kubelet hint chain; ${why}: ${counts}`, legacy, nft };
}
