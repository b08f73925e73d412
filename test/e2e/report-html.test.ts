// `clbprobe diagnose --html` on the demo's real loop (the loop lab: the client
// pod's connect to the LB IP comes back to its own node), rendered by a real
// headless Chromium: what a person sees on the page is the loop's path (client
// pod → LB VIP → node:NodePort → server pod, the reply skipping the LB), the
// Service's name and the fix. The screenshot is kept in test-artifacts/.
// Namespaces are cbr-*.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLoopLab, LAB, type LoopLab } from '../../src/demo/lab.js';
import { CHROMIUM, openPage, type Page } from '../support/chromium.js';
import { isRoot } from '../support/netns.js';
import { CLI, requireBuiltCli } from '../support/run-cli.js';

const ARTIFACTS = join(import.meta.dirname, '../../test-artifacts');

/** In the page: for each text, whether an element showing it is rendered, unhidden and on top at its centre. */
const VISIBLE = `(texts) => texts.map((t) => {
  const all = [...document.querySelectorAll('body *')].filter((e) => e.children.length === 0 || e.tagName === 'text');
  const el = all.find((e) => (e.textContent || '').includes(t));
  if (!el) return { t, visible: false, why: 'not in the page' };
  const r = el.getBoundingClientRect();
  const cs = getComputedStyle(el);
  if (r.width < 1 || r.height < 1 || cs.visibility !== 'visible' || cs.display === 'none' || Number(cs.opacity) === 0) {
    return { t, visible: false, why: 'not rendered' };
  }
  window.scrollTo(0, Math.max(0, r.top + window.scrollY - 100));
  const r2 = el.getBoundingClientRect();
  const top = document.elementFromPoint(r2.left + Math.min(r2.width / 2, 5), r2.top + r2.height / 2);
  const onTop = top !== null && (top === el || el.contains(top) || top.contains(el));
  return { t, visible: onTop, why: onTop ? '' : 'covered' };
})`;

describe.skipIf(!isRoot || !CHROMIUM)('diagnose --html in a real Chromium (loop lab)', () => {
  let lab: LoopLab;
  let dir: string;
  let page: Page;
  let html: string;
  let diagnoseExit: number | null;

  beforeAll(async () => {
    requireBuiltCli();
    dir = mkdtempSync(join(tmpdir(), 'cbr-'));
    lab = await createLoopLab('Local', 'cbr-');
    expect(await lab.connect(2000)).toBe('timeout');
    html = join(dir, 'node1.html');
    const r = spawnSync(
      process.execPath,
      [
        CLI,
        'diagnose',
        '--netns',
        lab.node.name,
        '--cluster-file',
        lab.writeClusterFile(dir),
        '--node-name',
        LAB.node1Name,
        '--html',
        html,
      ],
      { encoding: 'utf8' },
    );
    diagnoseExit = r.status;
    if (!existsSync(html)) throw new Error(`diagnose wrote no page (exit ${r.status}): ${r.stderr}`);
    page = await openPage();
    await page.navigate(`file://${html}`);
  }, 90_000);

  afterAll(async () => {
    // The lab's namespaces and processes go whatever the browser's teardown does.
    try {
      await page?.close();
    } finally {
      lab?.destroy();
      if (dir) rmSync(dir, { recursive: true, force: true });
    }
  });

  it('diagnose exits 1 (an active loop) and writes the page', () => {
    expect(diagnoseExit).toBe(1);
  });

  it('shows the loop path, the Service and the fix', async () => {
    const want = [
      'Service lab/web',
      'client pod',
      `${LAB.clientPod}:`,
      'LB VIP',
      `${LAB.vip}:${LAB.port}`,
      'node NodePort',
      `${LAB.node1}:${LAB.nodePort}`,
      'server pod',
      `${LAB.serverPod}:${LAB.serverPort}`,
      'skips the LB',
      'fix:',
      'externalTrafficPolicy',
    ];
    const seen = await page.evaluate<{ t: string; visible: boolean; why: string }[]>(
      `(${VISIBLE})(${JSON.stringify(want)})`,
    );
    expect(seen.filter((s) => !s.visible)).toEqual([]);
    // The drawing is there and big enough to read: four boxes, the reply arrow.
    const svg = await page.evaluate<{ w: number; boxes: number; dashed: number }>(
      `(() => { const s = document.querySelector('svg.path'); const r = s.getBoundingClientRect();
        return { w: r.width, boxes: s.querySelectorAll('rect').length, dashed: s.querySelectorAll('path[stroke-dasharray]').length }; })()`,
    );
    expect(svg.w).toBeGreaterThan(600);
    expect(svg.boxes).toBe(4);
    expect(svg.dashed).toBe(1);
  });

  it('keeps a screenshot as a test artefact', async () => {
    await page.evaluate('window.scrollTo(0, 0)');
    const png = await page.screenshot();
    expect(png.subarray(1, 4).toString()).toBe('PNG');
    expect(png.length).toBeGreaterThan(20_000);
    mkdirSync(ARTIFACTS, { recursive: true });
    writeFileSync(join(ARTIFACTS, 'diagnose-report.png'), png);
  });
});
