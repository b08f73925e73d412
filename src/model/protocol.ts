// The transport protocols of a Service port in the two spellings the node's tools use, and their IP protocol numbers.

/** As Kubernetes (and ipvsadm) spell it. */
export type ServiceProtocol = 'TCP' | 'UDP' | 'SCTP';
/** As conntrack(8), iptables and pcap filters spell it. */
export type LowerProtocol = 'tcp' | 'udp' | 'sctp';

const TABLE: readonly { name: ServiceProtocol; lower: LowerProtocol; number: number }[] = [
  { name: 'TCP', lower: 'tcp', number: 6 },
  { name: 'UDP', lower: 'udp', number: 17 },
  { name: 'SCTP', lower: 'sctp', number: 132 },
];

/** IPPROTO_* numbers by lower-case name. */
export const LOWER_PROTOCOL_NUMBERS = Object.fromEntries(TABLE.map((p) => [p.lower, p.number])) as Record<
  LowerProtocol,
  number
>;

/** A Service protocol's row by its name in any case ('tcp', 'TCP'); undefined for others. */
function byName(name: string): (typeof TABLE)[number] | undefined {
  const upper = name.toUpperCase();
  return TABLE.find((p) => p.name === upper);
}

/** The IPPROTO number of a Service protocol name (any case); undefined for anything else. */
export const protocolNumber = (name: string): number | undefined => byName(name)?.number;

/** The Service protocol of an IPPROTO number; undefined for others (ICMP, ...). */
export function protocolOfNumber(protoNumber: number): ServiceProtocol | undefined {
  return TABLE.find((p) => p.number === protoNumber)?.name;
}

/** The Service protocol of a name in any case ('tcp', 'TCP'); undefined for others. */
export const serviceProtocolOf = (name: string): ServiceProtocol | undefined => byName(name)?.name;

/** The lower-case name of an IPPROTO number given as text ('6' → 'tcp'), as iptables prints `-p 6`. */
export function lowerProtocolOfNumberText(text: string): LowerProtocol | undefined {
  return TABLE.find((p) => String(p.number) === text)?.lower;
}
