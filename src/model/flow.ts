// How a conntrack flow towards an LB VIP ended (clbprobe_conntrack_flows_total{outcome}).

export const FLOW_OUTCOMES = ['replied', 'unreplied', 'loopback_pair', 'not_snated'] as const;
export type FlowOutcome = (typeof FLOW_OUTCOMES)[number];
