// Bundle input failures name the file and 1-based line ("file:line: detail", as the NAT and IPVS parsers do).
import { LineParseError, truncate } from '../kernel/nat/errors.js';

/** The whole input is unusable (not the expected command's output at all). */
export class BundleParseError extends LineParseError {
  override name = 'BundleParseError';
}

/** A short, printable excerpt of a bad line for messages. */
export function excerpt(line: string, max = 60): string {
  return JSON.stringify(truncate(line.trim(), max));
}
