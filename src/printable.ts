// Text that goes to a terminal carries strings others control (annotations, DNS names, agents'
// answers, interface names); their control characters are shown, never obeyed, so they cannot
// move the cursor, clear the screen, recolour, retitle, reorder with bidi overrides or add lines.

/** C0 controls, DEL, C1 controls, the line and paragraph separators, and bidi embeddings/overrides/isolates. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is what it is for
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

const escapeOne = (c: string): string => {
  const code = c.charCodeAt(0);
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
};

/** `s` with every control character as a visible \xHH or \uHHHH; a backslash stays as is. */
export function printable(text: string): string {
  return text.replace(CONTROL, escapeOne);
}
