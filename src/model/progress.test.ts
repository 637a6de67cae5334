import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { describe, it } from 'node:test';
import { progressLine } from './progress.ts';

function sink(isTTY: boolean) {
  const chunks: string[] = [];
  const stream = Object.assign(new Writable({ write(c, _e, cb) { chunks.push(String(c)); cb(); } }), { isTTY, columns: 60 });
  return { stream, chunks };
}

describe('progress line', () => {
  it('is silent when the stream is not a TTY and not forced', () => {
    const { stream, chunks } = sink(false);
    const p = progressLine({ stream });
    p.onProgress(5, 10, 'reading');
    p.finish();
    assert.deepEqual(chunks, []);
  });
  it('forced on a pipe: one line per 10%', () => {
    const { stream, chunks } = sink(false);
    let t = 0; // one millisecond a call: the rate is 1 MB per ms
    const p = progressLine({ stream, force: true, label: 'tiny', now: () => t++ });
    for (let d = 0; d <= 100; d++) p.onProgress(d * 1e6, 100e6, 'x');
    p.finish();
    assert.equal(chunks.length, 11);
    assert.equal(chunks[10], 'tiny 100% 100.0/100.0 MB 1.00 GB/s x\n');
  });
  it('on a TTY: redraws in place, throttled, always draws the end, then ends the line', () => {
    const { stream, chunks } = sink(true);
    let t = 0;
    const p = progressLine({ stream, now: () => t, intervalMs: 100 });
    p.onProgress(1, 4, 'a');
    p.onProgress(2, 4, 'b'); // within 100 ms: skipped
    t = 200;
    p.onProgress(3, 4, 'c');
    p.onProgress(4, 4, 'd'); // the end is always drawn
    p.finish();
    assert.equal(chunks.length, 4);
    assert.ok(chunks.slice(0, 3).every((c) => c.startsWith('\r') && c.length === 60));
    assert.match(chunks[2]!, /100% .* d/);
    assert.equal(chunks[3], '\n');
  });
});
