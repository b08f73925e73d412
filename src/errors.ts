/** The message of a thrown value, whatever was thrown. */
export const errText = (e: unknown): string => (e instanceof Error ? e.message : String(e));
