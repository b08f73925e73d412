// Debian's headless Chromium driven over the DevTools protocol (the `ws`
// client the project already has), to look at a page as a person would: what
// is rendered and visible, and a screenshot. Chromium runs with its background
// networking off and a throwaway profile; its DevTools port is on loopback.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';

export const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));

export interface Page {
  navigate(url: string): Promise<void>;
  /** Evaluates an expression in the page and returns its JSON value. */
  evaluate<T>(expression: string): Promise<T>;
  /** The whole page, or its top `clip` pixels. */
  screenshot(clip?: { width: number; height: number }): Promise<Buffer>;
  close(): Promise<void>;
}

export async function openPage(width = 1280, height = 1000): Promise<Page> {
  if (!CHROMIUM) throw new Error('chromium not installed (apt-get install chromium)');
  const profile = mkdtempSync(join(tmpdir(), 'cbchrome-'));
  const proc: ChildProcess = spawn(
    CHROMIUM,
    [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-extensions',
      '--hide-scrollbars',
      `--window-size=${width},${height}`,
      `--user-data-dir=${profile}`,
      '--remote-debugging-address=127.0.0.1',
      '--remote-debugging-port=0',
      'about:blank',
    ],
    // Its own process group: the renderer and utility processes it forks
    // write into the profile too, and must die with it.
    { stdio: ['ignore', 'ignore', 'pipe'], detached: true },
  );
  const exited = new Promise<void>((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) resolve();
    else proc.once('exit', () => resolve());
  });
  const stop = async () => {
    try {
      process.kill(-proc.pid!, 'SIGKILL');
    } catch {
      proc.kill('SIGKILL');
    }
    await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
    // A child may still be closing its files for a moment after the group's
    // SIGKILL: retry rather than leave the profile behind or fail the test.
    rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  };
  try {
    const browserUrl = await new Promise<string>((resolve, reject) => {
      let err = '';
      const t = setTimeout(() => reject(new Error(`chromium did not start: ${err.slice(-500)}`)), 30_000);
      proc.stderr!.on('data', (b: Buffer) => {
        err += b;
        const m = /DevTools listening on (ws:\/\/\S+)/.exec(err);
        if (m) {
          clearTimeout(t);
          resolve(m[1]!);
        }
      });
      proc.on('exit', (code) => reject(new Error(`chromium exited ${code}: ${err.slice(-500)}`)));
    });
    const port = new URL(browserUrl).port;
    const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as {
      type: string;
      webSocketDebuggerUrl: string;
    }[];
    const target = targets.find((t) => t.type === 'page');
    if (!target) throw new Error('chromium has no page target');
    const ws = new WebSocket(target.webSocketDebuggerUrl);
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    let id = 0;
    const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
    const waiters: { method: string; resolve: () => void }[] = [];
    ws.on('message', (data: Buffer) => {
      const msg = JSON.parse(data.toString()) as {
        id?: number;
        result?: unknown;
        error?: { message: string };
        method?: string;
      };
      if (msg.id !== undefined) {
        const p = pending.get(msg.id);
        pending.delete(msg.id);
        if (msg.error) p?.reject(new Error(msg.error.message));
        else p?.resolve(msg.result);
      } else if (msg.method) {
        for (const w of waiters.filter((x) => x.method === msg.method)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve();
        }
      }
    });
    const send = <T>(method: string, params: object = {}): Promise<T> =>
      new Promise<T>((resolve, reject) => {
        pending.set(++id, { resolve: resolve as (v: unknown) => void, reject });
        ws.send(JSON.stringify({ id, method, params }));
      });
    const event = (method: string) => new Promise<void>((resolve) => waiters.push({ method, resolve }));
    await send('Page.enable');
    return {
      async navigate(url) {
        const loaded = event('Page.loadEventFired');
        await send('Page.navigate', { url });
        await loaded;
      },
      async evaluate<T>(expression: string) {
        const r = await send<{ result: { value: T }; exceptionDetails?: { text: string } }>('Runtime.evaluate', {
          expression,
          returnByValue: true,
        });
        if (r.exceptionDetails) throw new Error(`in the page: ${r.exceptionDetails.text}`);
        return r.result.value;
      },
      async screenshot(clip) {
        const r = await send<{ data: string }>('Page.captureScreenshot', {
          format: 'png',
          captureBeyondViewport: true,
          ...(clip ? { clip: { x: 0, y: 0, ...clip, scale: 1 } } : {}),
        });
        return Buffer.from(r.data, 'base64');
      },
      async close() {
        ws.close();
        await stop();
      },
    };
  } catch (e) {
    await stop();
    throw e;
  }
}
