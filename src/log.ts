// Structured JSON logs (pino) on stderr, so stdout stays for command output.
import pino from 'pino';

export type Logger = pino.Logger;

export function createLogger(level: string = process.env.CLBPROBE_LOG_LEVEL ?? 'info'): Logger {
  return pino({ level, base: { app: 'clbprobe' } }, pino.destination(2));
}
