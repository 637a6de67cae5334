import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, readFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ResidencyError } from '../../errors.ts';
import { loadTraces, FIXTURE_TRACES } from './load.ts';
import { parseJsonlTrace } from './jsonl.ts';
import { openTraceFile, TraceRecorder } from './recorder.ts';
import { documents } from './trace.ts';
import { recordedSteps } from '../traffic.ts';
import { readFileUnzipped } from '../../util/gzip-file.ts';

const badTrace = (fn: () => unknown, pattern: RegExp) =>
  assert.throws(fn, (e: unknown) => e instanceof ResidencyError && e.code === 'BAD_TRACE' && pattern.test(e.message));

describe('fixture traces', () => {
  it('loads every domain with the index geometry and document starts', () => {
    const set = loadTraces(FIXTURE_TRACES);
    assert.equal(set.layers, 6);
    assert.equal(set.experts, 64);
    assert.equal(set.topK, 6);
    assert.deepEqual([...set.traces.keys()].sort(), ['code_js', 'code_py', 'de', 'en', 'fr', 'ja', 'zh_CN']);
    const de = set.traces.get('de')!;
    assert.equal(de.tokens, 21648);
    assert.equal(de.ids.length, 21648 * 36);
    assert.equal(documents(de).reduce((n, [a, b]) => n + b - a, 0), de.tokens);
  });

  it('names the file and the field when the binary does not match the index', () => {
    const dir = mkdtempSync(join(tmpdir(), 'trace-'));
    const index = JSON.parse(readFileSync(join(FIXTURE_TRACES, 'index.json'), 'utf8'));
    index.domains = { de: index.domains.de };
    writeFileSync(join(dir, 'index.json'), JSON.stringify(index));
    writeFileSync(join(dir, 'de.bin'), Buffer.alloc(10));
    badTrace(() => loadTraces(dir), /de\.bin: 10 bytes, expected tokens 21648/);
    // The checkout keeps de.bin gzipped: unzipped, it reads the same.
    writeFileSync(join(dir, 'de.bin'), readFileUnzipped(join(FIXTURE_TRACES, 'de.bin.gz')));
    assert.deepEqual(loadTraces(dir).traces.get('de')!.ids, loadTraces(FIXTURE_TRACES, { only: ['de'] }).traces.get('de')!.ids);
    const bytes = readFileSync(join(dir, 'de.bin'));
    bytes[5 * 36 + 2 * 6 + 1] = 200; // row 5, layer 2
    writeFileSync(join(dir, 'de.bin'), bytes);
    badTrace(() => loadTraces(dir), /row 5 layer 2: expert id 200 out of range 0\.\.63/);
    writeFileSync(join(dir, 'index.json'), JSON.stringify({ ...index, top_k: 'six' }));
    badTrace(() => loadTraces(dir), /field 'top_k' must be a positive integer/);
  });
});

describe('JSONL traces', () => {
  const header = '{"format":"routing-trace","version":1,"layers":2,"experts":8,"top_k":2}';
  it('parses the minimal form, with "doc" starting documents', () => {
    const t = parseJsonlTrace([header, '{"layers":[[0,1],[2,3]]}', '{"layers":[[1,2],[3,4]]}', '{"doc":true,"layers":[[7,6],[5,4]]}', ''].join('\n'), 'x.jsonl');
    assert.equal(t.tokens, 3);
    assert.deepEqual(t.docStarts, [0, 2]);
    assert.deepEqual(Array.from(t.ids), [0, 1, 2, 3, 1, 2, 3, 4, 7, 6, 5, 4]);
  });
  it('groups recorded tokens by sequence in order of first appearance', () => {
    const t = parseJsonlTrace([header, '{"seq":5,"pos":0,"layers":[[0,1],[2,3]]}', '{"seq":9,"pos":0,"layers":[[4,5],[6,7]]}', '{"seq":5,"pos":1,"layers":[[1,0],[3,2]]}'].join('\n'), 'r.jsonl');
    assert.deepEqual(t.docStarts, [0, 2]);
    assert.deepEqual(Array.from(t.ids.subarray(0, 8)), [0, 1, 2, 3, 1, 0, 3, 2]);
  });
  it('rejects bad shapes and ids naming the line and the field', () => {
    badTrace(() => parseJsonlTrace(`${header}\n{"layers":[[0,1]]}`, 'a.jsonl'), /a\.jsonl:2: field 'layers' has 1 entries, expected 2/);
    badTrace(() => parseJsonlTrace(`${header}\n{"layers":[[0,1],[2]]}`, 'a.jsonl'), /a\.jsonl:2: layers\[1\] has 1 ids, expected top_k 2/);
    badTrace(() => parseJsonlTrace(`${header}\n{"layers":[[0,1],[2,9]]}`, 'a.jsonl'), /row 0 layer 1: expert id 9 out of range 0\.\.7/);
    badTrace(() => parseJsonlTrace(`${header}\n{"layers":[[0,0],[2,3]]}`, 'a.jsonl'), /row 0 layer 0: expert 0 picked twice/);
    badTrace(() => parseJsonlTrace('{"layers":[[0,1],[2,3]]}', 'a.jsonl'), /no header line and no expert count/);
    badTrace(() => parseJsonlTrace(`${header}\n{"layers":`, 'a.jsonl'), /a\.jsonl:2: not JSON/);
  });
  it('round-trips what the recorder writes (the engine format)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rec-'));
    mkdirSync(dir, { recursive: true });
    const file = join(dir, 'run.jsonl');
    const { recorder, close } = openTraceFile(file, { layers: 2, experts: 8, topK: 2 }, 'test');
    // Step 1: prefill of 2 tokens for seq 0 and 1 token for seq 1; step 2: one decode token each.
    recorder.recordStep([{ seq: 0, startPos: 0, tokens: 2 }, { seq: 1, startPos: 0, tokens: 1 }], Int32Array.from([0, 1, 2, 3, 1, 2, 3, 4, 7, 6, 5, 4]));
    recorder.recordStep([{ seq: 0, startPos: 2, tokens: 1 }, { seq: 1, startPos: 1, tokens: 1 }], Int32Array.from([2, 3, 4, 5, 0, 7, 1, 6]));
    close();
    const set = loadTraces(file);
    const t = set.traces.get('run')!;
    assert.equal(t.tokens, 5);
    assert.deepEqual(t.docStarts, [0, 3]);
    assert.deepEqual(Array.from(t.ids), [0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5, 7, 6, 5, 4, 0, 7, 1, 6]);
    // The recorded steps come back exactly: tokens per step and chunk order.
    const steps = recordedSteps(t, 2);
    assert.deepEqual(steps.map((s) => [s.tokens, s.counted]), [[3, false], [2, true]]);
    assert.deepEqual(Array.from(steps[0]!.picks), [0, 1, 2, 3, 1, 2, 3, 4, 7, 6, 5, 4]);
    assert.deepEqual(Array.from(steps[1]!.picks), [2, 3, 4, 5, 0, 7, 1, 6]);
    assert.throws(() => new TraceRecorder({ layers: 2, experts: 8, topK: 2 }, () => {}).recordStep([{ seq: 0, startPos: 0, tokens: 2 }], new Int32Array(4)), /routing has 4 ids/);
  });
});
