// `residency trace` end to end on models/tiny-moe: the routing it records is the fixture's (parity.json's
// prefill routing, traces/de.bin across a chunk boundary), the file loads and replays in the simulator,
// and bad input gets an error naming the flag or file:line.
import { describe, it, before } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ResidencyError } from '../errors.ts';
import { loadModel, type LoadedModel } from '../model/load.ts';
import { moeLayerCount } from '../model/spec.ts';
import { loadTraces } from '../sim/traces/load.ts';
import { readJsonlTrace } from '../sim/traces/jsonl.ts';
import { simulateCommand } from './simulate.ts';
import { TRACE_CHUNK, runTrace, traceCommand, traceOptionsFrom, type TraceOptions } from './trace.ts';
import { TINY_MOE_MODEL as MODEL, familyCheckpoint, tinyMoeFile, tinyMoeTrace } from '../../fixtures/fixture-paths.ts';

interface Case { domain: string; prompt: string; prompt_ids: number[]; prefill_routing: number[][][] }

async function quiet<T>(fn: () => Promise<T>): Promise<T> {
  const log = console.log;
  console.log = () => {};
  try { return await fn(); } finally { console.log = log; }
}

describe('residency trace', () => {
  let model: LoadedModel;
  const dir = mkdtempSync(join(tmpdir(), 'trace-'));
  const opts = (over: Partial<TraceOptions>): TraceOptions => ({ modelDir: MODEL, source: { kind: 'text', files: [] }, out: join(dir, 'x.jsonl'), ...over });
  before(async () => { model = await loadModel(MODEL); });

  it("reproduces parity.json's prefill routing for a prompt's text", async () => {
    const cases = (JSON.parse(readFileSync(tinyMoeFile('parity.json'), 'utf8')) as { cases: Case[] }).cases;
    // Two domains, two scripts: the text must encode back to the reference ids (no special tokens).
    for (const c of [cases.find((x) => x.domain === 'en')!, cases.find((x) => x.domain === 'ja')!]) {
      const text = join(dir, `${c.domain}.txt`);
      writeFileSync(text, c.prompt);
      assert.deepEqual(model.tokenizer.encode(c.prompt), c.prompt_ids, `${c.domain}: prompt text -> prompt_ids`);
      const out = join(dir, `parity-${c.domain}.jsonl`);
      const s = await runTrace(opts({ source: { kind: 'text', files: [text] }, out }), model);
      assert.deepEqual({ documents: s.documents, tokens: s.tokens }, { documents: 1, tokens: c.prompt_ids.length });
      const rows = readFileSync(out, 'utf8').trim().split('\n').slice(1).map((l) => JSON.parse(l) as { seq: number; pos: number; layers: number[][] });
      assert.equal(rows.length, c.prompt_ids.length);
      rows.forEach((r, t) => {
        assert.equal(r.pos, t);
        assert.deepEqual(r.layers, c.prefill_routing[t], `${c.domain} token ${t}`);
      });
    }
  });

  it("matches the fixture's de trace across a prefill chunk boundary", async () => {
    // prompts.json's first de document is the fixture trace's first (recorded in one pass, 512 tokens); both
    // are read gzipped, as the checkout keeps them.
    const n = TRACE_CHUNK + 44;
    const out = join(dir, 'de.jsonl');
    const s = await runTrace(opts({ source: { kind: 'prompts', file: tinyMoeFile('prompts.json.gz'), domain: 'de' }, out, maxDocs: 1, maxTokensPerDoc: n }), model);
    assert.deepEqual({ documents: s.documents, tokens: s.tokens, truncated: s.truncated }, { documents: 1, tokens: n, truncated: 1 });
    const ours = readJsonlTrace(out);
    const ref = tinyMoeTrace('de').subarray(0, n * 36);
    assert.deepEqual(Array.from(ours.ids), Array.from(ref));
  });

  it('writes a trace the simulator loads (documents, tokens) and replays', async () => {
    const jsonl = join(dir, 'docs.jsonl');
    const docs = ['The ls command lists files.', '', 'Die Datei wird geöffnet und gelesen.', 'def f(x):\n    return x + 1\n'];
    writeFileSync(jsonl, docs.map((t) => JSON.stringify({ body: t, id: 1 })).join('\n') + '\n\n');
    const out = join(dir, 'mine.jsonl');
    const s = await runTrace(opts({ source: { kind: 'jsonl', file: jsonl, field: 'body' }, out, maxTokensPerDoc: 8 }), model);
    const lengths = docs.filter((t) => t !== '').map((t) => Math.min(8, model.tokenizer.encode(t).length));
    assert.deepEqual({ documents: s.documents, tokens: s.tokens, skipped: s.skippedEmpty }, { documents: 3, tokens: lengths[0]! + lengths[1]! + lengths[2]!, skipped: 1 });

    const set = loadTraces(out);
    const t = set.traces.get('mine')!;
    assert.deepEqual([set.layers, set.experts, set.topK], [moeLayerCount(model.spec), model.spec.numExperts, model.spec.topK]);
    assert.equal(t.tokens, s.tokens);
    assert.deepEqual(t.docStarts, [0, lengths[0], lengths[0]! + lengths[1]!]);

    // Step for step (one token per step), and as traffic built from the documents.
    const recorded = JSON.parse(await captured(() => simulateCommand.run(['--traces', out, '--phases', 'recorded', '--hot', '49', '--policy', 'static', '--json'])));
    assert.equal(recorded.steps, s.tokens);
    const traffic = JSON.parse(await captured(() => simulateCommand.run(['--traces', out, '--phases', 'mine:40', '--users', '2', '--hot', '49', '--policy', 'adaptive', '--json'])));
    assert.equal(traffic.steps, 40);
  });

  it('a model with a dense layer (deepseek-v3-tiny, layer 0): the header and rows count the MoE layers only', async () => {
    const DEEPSEEK = familyCheckpoint('deepseek-v3-tiny');
    const ds = await loadModel(DEEPSEEK);
    const text = join(dir, 'ds.txt');
    writeFileSync(text, 'The ls command lists files.');
    const out = join(dir, 'ds.jsonl');
    const s = await runTrace(opts({ modelDir: DEEPSEEK, source: { kind: 'text', files: [text] }, out }), ds);
    const set = loadTraces(out);
    assert.deepEqual([set.layers, set.experts, set.topK], [3, 32, 4]);
    const rows = readFileSync(out, 'utf8').trim().split('\n').slice(1).map((l) => JSON.parse(l) as { layers: number[][] });
    assert.equal(rows.length, s.tokens);
    assert.ok(rows.every((r) => r.layers.length === 3 && r.layers.every((k) => k.length === 4)));
  });

  it('names the flag, file or file:line in bad input errors', async () => {
    const bad = (argv: string[], re: RegExp) => assert.rejects(quiet(() => traceCommand.run(argv)), (e: unknown) => e instanceof ResidencyError && re.test(e.message));
    const out = ['--out', join(dir, 'bad.jsonl')];
    await bad(out, /give exactly one of --text FILE, --jsonl FILE or --prompts/);
    await bad(['--text', 'a.txt', '--jsonl', 'b.jsonl', ...out], /got --text and --jsonl/);
    await bad(['--text', 'a.txt'], /--out TRACE\.jsonl is required/);
    await bad(['--text', 'a.txt', '--max-docs', '0', ...out], /--max-docs '0': expected an integer >= 1/);
    await bad(['--text', 'a.txt', '--threads', 'lots', ...out], /--threads 'lots'/);
    await bad(['--prompts', 'p.json', ...out], /--prompts needs --domain/);
    await bad(['--text', 'a.txt', '--field', 'body', ...out], /--field only applies to --jsonl/);
    await bad(['--text', 'a.txt', '--bogus', ...out], /bogus/);
    await bad(['--text', join(dir, 'missing.txt'), ...out], /--text .*missing\.txt: cannot read/);

    const jsonl = join(dir, 'broken.jsonl');
    writeFileSync(jsonl, '{"text":"fine"}\n\n{"text": oops}\n');
    await bad(['--jsonl', jsonl, ...out], new RegExp(`--jsonl ${jsonl}:3: not JSON`));
    writeFileSync(jsonl, '{"text":"fine"}\n{"body":"wrong field"}\n');
    await bad(['--jsonl', jsonl, ...out], new RegExp(`--jsonl ${jsonl}:2: field 'text' must be a string, got no such field`));
    await bad(['--prompts', tinyMoeFile('prompts.json.gz'), '--domain', 'klingon', ...out], /--domain 'klingon': not in .*prompts\.json\.gz \(it has code_js, /);
    const empty = join(dir, 'empty.txt');
    writeFileSync(empty, '');
    await assert.rejects(runTrace(opts({ source: { kind: 'text', files: [empty] } }), model), /no documents to trace/);
    await assert.rejects(runTrace(opts({ source: { kind: 'text', files: [jsonl] }, out: join(dir, 'no-such-dir', 'x.jsonl') }), model), /--out .*no-such-dir.*: cannot write/);
  });

  it('parses a full command line into options', () => {
    const o = traceOptionsFrom({ jsonl: 'd.jsonl', out: 't.jsonl', 'max-docs': '5', 'max-tokens-per-doc': '300', threads: 'auto', backend: 'cpu', help: false });
    assert.deepEqual(o.source, { kind: 'jsonl', file: 'd.jsonl', field: 'text' });
    assert.deepEqual([o.maxDocs, o.maxTokensPerDoc, o.threads], [5, 300, 'auto']);
  });
});

async function captured(fn: () => Promise<unknown>): Promise<string> {
  const lines: string[] = [];
  const log = console.log;
  console.log = (...a: unknown[]) => { lines.push(a.join(' ')); };
  try { await fn(); } finally { console.log = log; }
  return lines.join('\n');
}
