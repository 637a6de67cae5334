// Hostile checkpoint folders (issue 46 item 6): each is refused quickly, naming the file and field, before
// anything is sized by it. Each load runs in a child with a kill timer: a blocking open of a FIFO never
// returns, and a 1e8-position config allocated for minutes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { syntheticTokenizerJson } from './synthetic.ts';
import { SHIPPED_MODEL } from './test-helpers.ts';

const SHARDS = ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors'];

/** A copy of the shipped tiny model (shards linked, the small files copied), `edit` applied to it. */
function hostileCopy(root: string, name: string, edit: (dir: string) => void): string {
  const dir = join(root, name);
  mkdirSync(dir);
  for (const f of ['config.json', 'tokenizer.json', 'tokenizer_config.json', 'model.safetensors.index.json']) copyFileSync(join(SHIPPED_MODEL, f), join(dir, f));
  for (const f of SHARDS) symlinkSync(join(SHIPPED_MODEL, f), join(dir, f));
  edit(dir);
  return dir;
}

const editConfig = (change: Record<string, unknown>) => (dir: string) => {
  const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...cfg, ...change }));
};

/** loadModel(dir) in a child: its error (code and message) and how long it took, or 'hung'. */
function loadInChild(dir: string, killAfterMs = 30_000): Promise<{ ok: boolean; code?: string; message?: string; ms: number } | 'hung'> {
  const script = `
    import { loadModel } from ${JSON.stringify(new URL('./load.ts', import.meta.url).href)};
    const t0 = performance.now();
    try { await loadModel(${JSON.stringify(dir)}); console.log(JSON.stringify({ ok: true, ms: performance.now() - t0 })); }
    catch (e) { console.log(JSON.stringify({ ok: false, code: e.code, message: e.message, ms: performance.now() - t0 })); }
    process.exit(0);`;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    child.stdout.setEncoding('utf8').on('data', (s: string) => { out += s; });
    child.stderr.setEncoding('utf8').on('data', (s: string) => { err += s; });
    let killed = false;
    const timer = setTimeout(() => { killed = true; child.kill('SIGKILL'); }, killAfterMs);
    child.once('exit', () => {
      clearTimeout(timer);
      const last = out.trim().split('\n').at(-1);
      resolve(killed ? 'hung' : last ? JSON.parse(last) : { ok: false, code: 'NO_OUTPUT', message: `the child printed nothing: ${err.trim()}`, ms: NaN });
    });
  });
}

const deepHeader = (depth: number) => {
  const json = `{"a":${'['.repeat(depth)}${']'.repeat(depth)}}`;
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  return Buffer.concat([len, Buffer.from(json)]);
};

const cases: [string, (dir: string) => void, string, RegExp][] = [
  ['max_position_embeddings 1e8', editConfig({ max_position_embeddings: 1e8 }), 'BAD_CONFIG', /field max_position_embeddings: expected at most 4,194,304.*got 100000000/],
  ['max_position_embeddings 1e9', editConfig({ max_position_embeddings: 1e9 }), 'BAD_CONFIG', /field max_position_embeddings: expected at most/],
  ['num_hidden_layers 1e6', editConfig({ num_hidden_layers: 1e6 }), 'BAD_CONFIG', /field num_hidden_layers: expected at most 1,024/],
  ['num_experts 1e6', editConfig({ num_experts: 1e6 }), 'BAD_CONFIG', /field num_experts: expected at most 16,384/],
  ['vocab_size 1e9', editConfig({ vocab_size: 1e9 }), 'BAD_CONFIG', /field vocab_size: expected at most/],
  ['layers x experts past the bound', editConfig({ num_hidden_layers: 1024, num_experts: 16_384 }), 'BAD_CONFIG', /num_hidden_layers 1024 x 16384 experts per layer/],
  ['a FIFO at config.json', (d) => { rmSync(join(d, 'config.json')); execFileSync('mkfifo', [join(d, 'config.json')]); }, 'BAD_CONFIG', /config\.json: .*a FIFO, not a regular file/],
  ['a FIFO at tokenizer.json', (d) => { rmSync(join(d, 'tokenizer.json')); execFileSync('mkfifo', [join(d, 'tokenizer.json')]); }, 'BAD_CHECKPOINT', /tokenizer\.json: .*a FIFO, not a regular file/],
  ['a folder at tokenizer.json', (d) => { rmSync(join(d, 'tokenizer.json')); mkdirSync(join(d, 'tokenizer.json')); }, 'BAD_CHECKPOINT', /tokenizer\.json: .*a folder, not a regular file/],
  ['a FIFO at tokenizer_config.json', (d) => { rmSync(join(d, 'tokenizer_config.json')); execFileSync('mkfifo', [join(d, 'tokenizer_config.json')]); }, 'BAD_CHECKPOINT', /tokenizer_config\.json: .*a FIFO/],
  ['a 100k-deep safetensors header', (d) => { rmSync(join(d, SHARDS[1]!)); writeFileSync(join(d, SHARDS[1]!), deepHeader(100_000)); }, 'BAD_CHECKPOINT', /model-00002-of-00002\.safetensors: header nests deeper than 64 levels/],
  ['a shard that is a folder', (d) => { rmSync(join(d, SHARDS[1]!)); mkdirSync(join(d, SHARDS[1]!)); }, 'BAD_CHECKPOINT', /shard model-00002-of-00002\.safetensors .*is a folder, not a regular file/],
  ['a shard that is a FIFO', (d) => { rmSync(join(d, SHARDS[1]!)); execFileSync('mkfifo', [join(d, SHARDS[1]!)]); }, 'BAD_CHECKPOINT', /shard model-00002-of-00002\.safetensors .*is a FIFO, not a regular file/],
  ['a tokenizer of 257 tokens for a vocabulary of 8,192', (d) => writeFileSync(join(d, 'tokenizer.json'), JSON.stringify(syntheticTokenizerJson())), 'BAD_CHECKPOINT', /tokenizer\.json has 257 tokens but config\.json vocab_size is 8192/],
];

test('hostile checkpoint folders are refused in seconds, naming the file and the field', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'hostile-'));
  const wrong: string[] = [];
  try {
    for (const [name, edit, code, pattern] of cases) {
      const dir = hostileCopy(root, name.replace(/[^a-z0-9]+/gi, '-'), edit);
      const r = await loadInChild(dir);
      t.diagnostic(`${name}: ${r === 'hung' ? 'hung (killed after 30 s)' : `${r.ok ? 'loaded' : `${r.code}: ${r.message?.slice(0, 160)}`} in ${r.ms.toFixed(0)} ms`}`);
      if (r === 'hung') wrong.push(`${name}: hung`);
      else if (r.ok) wrong.push(`${name}: loaded`);
      else if (r.code !== code || !pattern.test(r.message!)) wrong.push(`${name}: ${r.code}: ${r.message}`);
      else if (r.ms > 5000) wrong.push(`${name}: refused after ${r.ms.toFixed(0)} ms`);
    }
    const fine = await loadInChild(hostileCopy(root, 'untouched', () => {}));
    if (fine === 'hung' || !fine.ok) wrong.push(`the untouched copy: ${JSON.stringify(fine)}`);
    assert.deepEqual(wrong, []);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
