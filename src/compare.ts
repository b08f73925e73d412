/**
 * Orders strings by UTF-16 code unit, the same on every machine. Not localeCompare: its order
 * depends on the locale and ICU's collation rules (it skips punctuation at first), and its first
 * call maps ICU's collation data into the process (~2.6 MB more RSS in the agent, measured).
 */
export function byText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
