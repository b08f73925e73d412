// Parse failures of NAT inputs name the input and the 1-based line, so a user can open the capture at the right place.

/** An input that is not the expected command's output at all, named by input and 1-based line. */
export class LineParseError extends Error {
  constructor(
    readonly source: string,
    readonly line: number,
    detail: string,
  ) {
    super(lineIssue(source, line, detail));
  }
}

export class NatParseError extends LineParseError {
  override name = 'NatParseError';
}

/** Text of a warning about one line of an input. */
export function lineIssue(source: string, line: number, detail: string): string {
  return `${source}:${line}: ${detail}`;
}

/** A line quoted in a warning, cut to `max` characters. */
export function truncate(s: string, max = 60): string {
  return s.length > max ? `${s.slice(0, max - 3)}...` : s;
}
