// `residency serve --residency-dir DIR` across restarts (issue 46 item 9): a SIGKILLed server's learned map is
// resumed by the next one (the boot line says so); --fresh and --map start elsewhere, as said.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readMapRecord } from '../residency/map-file.ts';
import { withServe } from './serve-child.ts';

const completion = (url: string, prompt: string) => fetch(`${url}/v1/completions`, {
  method: 'POST', headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ prompt, max_tokens: 48, temperature: 0, ignore_eos: true }),
}).then((r) => r.text());

const mapOf = async (url: string) => (await (await fetch(`${url}/v1/residency`)).json()).map;

test('a SIGKILLed server\'s learned map is resumed on restart; --fresh and --map start elsewhere; the boot line says which', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'resume-'));
  const mapFile = join(dir, 'map.json');
  try {
    let learned: unknown;
    await withServe(['--port', '0', '--hot', '49', '--adapt', '--residency-dir', dir, '--no-access-log'], async ({ child, url, stderr }) => {
      assert.match(stderr, /; map default/);
      // Traffic until moves have landed and map.json holds them (written within a second of landing).
      for (let round = 0; round < 40; round++) {
        await Promise.all(['The ls command', 'def parse(args):', 'Die Datei wird', 'ファイルを'].map((p) => completion(url, `${p} ${round}`)));
        const rec = readMapRecord(mapFile);
        if (rec && rec.swaps_applied > 0) break;
      }
      await new Promise((r) => setTimeout(r, 1500));
      learned = readMapRecord(mapFile)!.map;
      assert.ok(readMapRecord(mapFile)!.swaps_applied > 0, 'moves landed and were written');
      child.kill('SIGKILL');
    });
    await withServe(['--port', '0', '--residency-dir', dir, '--no-access-log'], async ({ url, stderr }) => {
      assert.match(stderr, /; map resumed/);
      assert.match(stderr, /map: resumed from .*map\.json/);
      assert.deepEqual(await mapOf(url), learned, 'the banks hold the map the killed server had written');
    });
    await withServe(['--port', '0', '--residency-dir', dir, '--hot', '40', '--no-access-log'], async () => {}).then(
      () => assert.fail('a --hot that disagrees with the saved map must be refused'),
      (e: Error) => assert.match(e.message, /--hot 40, but .*map\.json .*holds 49 hot per layer.*--fresh/s),
    );
    await withServe(['--port', '0', '--residency-dir', dir, '--fresh', '--hot', '40', '--no-access-log'], async ({ url, stderr }) => {
      assert.match(stderr, /; map default/);
      assert.match(stderr, /--fresh: .*map\.json moved to map\.json\.stale/);
      assert.equal((await mapOf(url)).hot_per_layer, 40);
    });
    assert.ok(existsSync(`${mapFile}.stale`));
    const given = join(dir, 'given.json');
    writeFileSync(given, JSON.stringify(learned));
    await withServe(['--port', '0', '--residency-dir', dir, '--map', given, '--no-access-log'], async ({ url, stderr }) => {
      assert.match(stderr, /; map --map/);
      assert.deepEqual(await mapOf(url), learned);
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
