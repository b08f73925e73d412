// Which xtables backend (legacy or nft) kube-proxy and kubelet are using, decided
// the way kube-proxy's image decides it (kubernetes-sigs/iptables-wrappers):
//   1. a KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY chain in the nft output -> nft;
//   2. the same chains in the legacy output -> legacy (kubelet >= 1.17 makes them);
//   3. otherwise the backend with more rule lines wins, nft on a tie.
// A backend whose save commands cannot run at all loses to one that can.
// The wrapper looks only at the mangle table for nft (to be quick); we have every
// table of both backends at hand, so both are checked in full.
import type { BackendChoice, BackendEvidence } from './types.js';

export interface BackendOutput {
  /** iptables-save and ip6tables-save texts of this backend that could be read. */
  texts: string[];
  /** Why (some of) this backend could not be read. */
  error?: string;
}

const KUBELET_CHAIN = /^:(KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY)\s/m;
const RULE_LINE = /^(?:\[\d+:\d+\]\s+)?-/;

export function backendEvidence(out: BackendOutput): BackendEvidence {
  let ruleLines = 0;
  let kubeRuleLines = 0;
  for (const text of out.texts) {
    for (const line of text.split('\n')) {
      if (!RULE_LINE.test(line)) continue;
      ruleLines++;
      if (line.includes('KUBE-')) kubeRuleLines++;
    }
  }
  return {
    ruleLines,
    kubeRuleLines,
    kubeletChains: out.texts.some((t) => KUBELET_CHAIN.test(t)),
    ...(out.error ? { error: out.error } : {}),
  };
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
