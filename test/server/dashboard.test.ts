// The dashboard in headless Chromium: the heatmap and the charts draw live data from the server.
// Saves a screenshot to out/dashboard.png.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { browserMissing, launchChromium } from './browser.ts';
import { resolve } from 'node:path';
import { startServing } from '../../src/server/boot.ts';
import { post } from './helpers.ts';

// The page functions below run in the browser; node's types have no DOM, so name its globals loosely.
declare const window: any;
declare const document: any;
type HTMLCanvasElement = any;

const missing = browserMissing();

test('dashboard renders the heatmap and the cold-share chart with live data', { skip: missing ?? false, timeout: 60_000 }, async () => {
  // The real engine on tiny-moe, adapting, draining often so a short test sees drains and swaps.
  const serving = await startServing({
    modelDir: resolve(process.cwd(), 'models/tiny-moe'), backend: 'cpu', hot: 49, adapt: true, budgets: { drain_every: 8 },
    port: 0, host: '127.0.0.1', log: () => {}, config: { apiKey: 'k3y', sampleSeconds: 0.1 },
  });
  const s = serving.server;
  let chrome: Awaited<ReturnType<typeof launchChromium>> | undefined;
  try {
    chrome = await launchChromium();
    // Traffic in two languages, so the heatmap, cold share and throughput have something to show.
    const prompts = ['The ls command lists', 'Die Datei wird gelesen', 'ファイルを開く', 'def main(argv):'];
    await Promise.all(prompts.map((prompt) => post(`${s.url}/v1/completions`, { prompt, max_tokens: 48, temperature: 0, ignore_eos: true }, { authorization: 'Bearer k3y' })));
    const page = await chrome.context.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(`${s.url}/#key=k3y`);
    // Keep some traffic flowing while the page polls.
    const more = Promise.all(prompts.map((prompt) => post(`${s.url}/v1/completions`, { prompt, max_tokens: 64, ignore_eos: true, seed: 1 }, { authorization: 'Bearer k3y' })));
    await page.waitForFunction(() => {
      const d = (window as any).__dashboard;
      return d?.updates >= 3 && d.last?.cold_share.window !== null && d.last?.history.length >= 3;
    }, undefined, { timeout: 30_000 });
    await more;
    const drawn = await page.evaluate(() => {
      const cv = document.getElementById('heatmap') as HTMLCanvasElement;
      const px = cv.getContext('2d')!.getImageData(0, 0, cv.width, cv.height).data;
      const colors = new Set<number>();
      let red = 0;
      for (let i = 0; i < px.length; i += 4) {
        colors.add((px[i]! << 16) | (px[i + 1]! << 8) | px[i + 2]!);
        if (px[i] === 0xff && px[i + 1] === 0x6b && px[i + 2] === 0x6b) red++;
      }
      const cold = document.getElementById('coldshare')!;
      const line = cold.querySelector('polyline');
      return {
        colors: colors.size, red,
        coldPoints: line ? line.getAttribute('points')!.trim().split(/\s+/).length : 0,
        throughputLines: document.querySelectorAll('#throughput polyline').length,
        timeTicks: [...document.querySelectorAll('#coldshare .time-tick')].map((t: any) => t.textContent),
        state: document.getElementById('state')!.textContent,
        status: document.getElementById('status')!.textContent,
        lastError: (window as any).__dashboard.lastError,
      };
    });
    assert.deepEqual(errors, []);
    assert.equal(drawn.lastError, null);
    assert.ok(drawn.colors > 5, `heatmap drew ${drawn.colors} distinct colors`);
    assert.ok(drawn.red > 0, 'cold experts are framed in red');
    assert.ok(drawn.coldPoints >= 2, `cold-share chart has ${drawn.coldPoints} points`);
    assert.equal(drawn.throughputLines, 1);
    assert.equal(drawn.timeTicks.length, 5, 'a time axis');
    assert.match(drawn.timeTicks[0], /^-\d+ s$/);
    assert.equal(drawn.state, 'adapting');
    // The buttons drive the live controller through POST /v1/residency/control with the page's key.
    const controllerAfter = async (button: string, want: (c: any) => boolean) => {
      const before = await page.evaluate(() => (window as any).__dashboard.controls);
      await page.click(`#${button}`);
      await page.waitForFunction((n: number) => (window as any).__dashboard.controls > n || (window as any).__dashboard.lastControlError, before, { timeout: 10_000 });
      assert.equal(await page.evaluate(() => (window as any).__dashboard.lastControlError), null);
      assert.ok(want(serving.driver!.controller), `${button}: the controller changed`);
    };
    await controllerAfter('freeze', (c) => c.frozen === true);
    await page.waitForFunction(() => document.getElementById('state')!.textContent === 'frozen (counting only)', undefined, { timeout: 10_000 });
    await controllerAfter('adapt', (c) => c.frozen === false);
    await controllerAfter('restore', () => true);
    assert.match(await page.evaluate(() => document.getElementById('control-status')!.textContent), /^done: /);
    assert.match(drawn.status!, /live/);
    mkdirSync('out', { recursive: true });
    await page.screenshot({ path: 'out/dashboard.png', fullPage: true });
  } finally {
    await chrome?.close();
    await serving.close();
  }
});
