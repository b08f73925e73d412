/**
 * Orders strings by UTF-16 code unit, the same on every machine; localeCompare's order depends on
 * the locale and ICU's collation rules.
 */
export function byText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
