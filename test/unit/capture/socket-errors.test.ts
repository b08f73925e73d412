import { describe, expect, it } from 'vitest';
import { MAX_RUN, RETRY_MS, RUN_GAP_MS, SocketErrorPolicy } from '../../../src/capture/pcap-reader.js';

describe('SocketErrorPolicy', () => {
  it('watches again at once after a lone error (a link down), every time', () => {
    const p = new SocketErrorPolicy();
    for (let t = 0; t < 10; t++) expect(p.onError(t * RUN_GAP_MS)).toEqual({ watch: 'now' });
    expect(p.total).toBe(10);
  });

  it('slows an error that comes straight back to one per RETRY_MS, then gives up', () => {
    const p = new SocketErrorPolicy();
    let t = 0;
    expect(p.onError(t)).toEqual({ watch: 'now' });
    const actions = [];
    // Each retry fails at once: the next error comes RETRY_MS (+1) after the previous one.
    for (let i = 0; i < MAX_RUN; i++) actions.push(p.onError((t += i === 0 ? 1 : RETRY_MS + 1)));
    expect(actions.slice(0, -1)).toEqual(Array(MAX_RUN - 1).fill({ watch: 'later', afterMs: RETRY_MS }));
    expect(actions.at(-1)).toEqual({ watch: 'never', run: MAX_RUN + 1 });
    // Bounded: at most MAX_RUN + 1 callbacks, over about (MAX_RUN - 1) * RETRY_MS.
    expect(t).toBeLessThan(MAX_RUN * RETRY_MS);
  });

  it('starts a new run after a quiet RUN_GAP_MS', () => {
    const p = new SocketErrorPolicy();
    for (let i = 0; i < MAX_RUN; i++) p.onError(i * RETRY_MS);
    expect(p.onError((MAX_RUN - 1) * RETRY_MS + RUN_GAP_MS)).toEqual({ watch: 'now' });
  });
});
