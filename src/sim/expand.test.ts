import { test } from 'node:test';
import assert from 'node:assert/strict';
import { expansion, expandTrace, expandTraceSet } from './expand.ts';
import { fitOn } from './setup.ts';
import { traceCounts } from './fit.ts';
import { readFixtureTraces } from './traces/fixture.ts';
import { FIXTURE_TRACES } from './traces/load.ts';
import { ResidencyError } from '../errors.ts';
import type { Geometry } from './policies/policy.ts';
import type { TraceSet } from './traces/trace.ts';

const fixture = readFixtureTraces(FIXTURE_TRACES, ['en', 'code_js', 'de', 'ja']);
const BIG = { layers: 16, experts: 384 };
const big = expandTraceSet(fixture, BIG);

/** Cold share of `domains`' picks against a map fitted (top-H) on `fitDomains`. */
function coldShare(set: TraceSet, hot: number, fitDomains: string[], domains: string[]): number {
  const g: Geometry = { layers: set.layers, experts: set.experts, topK: set.topK, hotPerLayer: hot };
  const map = fitOn(set, g, fitDomains, 'test');
  const counts = traceCounts(domains.map((d) => set.traces.get(d)!), g);
  let cold = 0; let all = 0;
  map.layers_map.forEach((rows, l) => {
    for (const e of rows.cold) cold += counts[l * set.experts + e]!;
    for (let e = 0; e < set.experts; e++) all += counts[l * set.experts + e]!;
  });
  return cold / all;
}

test('expansion keeps rows, documents and top-k, and each big pick falls in its fixture expert\'s group', () => {
  const x = expansion(fixture, BIG);
  for (const [name, t] of fixture.traces) {
    const b = big.traces.get(name)!;
    assert.equal(b.tokens, t.tokens);
    assert.deepEqual(b.docStarts, t.docStarts);
    assert.equal(b.layers, 16);
    assert.equal(b.experts, 384);
    assert.equal(b.topK, t.topK);
    for (let r = 0; r < Math.min(t.tokens, 500); r++) {
      for (let L = 0; L < 16; L++) {
        for (let k = 0; k < t.topK; k++) {
          const e = t.ids[(r * t.layers + (L % t.layers)) * t.topK + k]!;
          const big1 = b.ids[(r * 16 + L) * t.topK + k]!;
          assert.equal(Math.floor(big1 / 6), x.perm[L * 64 + e], `row ${r} layer ${L} pick ${k}`);
        }
      }
    }
  }
});

test('expansion is deterministic and layers sharing a fixture layer differ', () => {
  const again = expandTrace(fixture.traces.get('en')!, expansion(fixture, BIG));
  assert.deepEqual(again.ids, big.traces.get('en')!.ids);
  const en = big.traces.get('en')!;
  let same = 0;
  for (let r = 0; r < 200; r++) for (let k = 0; k < 6; k++) if (en.ids[(r * 16 + 0) * 6 + k] === en.ids[(r * 16 + 6) * 6 + k]) same++;
  assert.ok(same < 200 * 6 * 0.2, `layers 0 and 6 agree on ${same} of 1200 picks`);
});

test('expansion keeps the domain structure: a map fitted on en+code serves de+ja far worse, as on the fixture', () => {
  const fitted = ['en', 'code_js'];
  const shifted = ['de', 'ja'];
  const smallHome = coldShare(fixture, 49, fitted, fitted);
  const smallShift = coldShare(fixture, 49, fitted, shifted);
  const bigHome = coldShare(big, 295, fitted, fitted);
  const bigShift = coldShare(big, 295, fitted, shifted);
  // The fixture's shift penalty survives the expansion (not flattened towards uniform routing).
  assert.ok(smallShift > 2 * smallHome, `fixture: home ${smallHome}, shifted ${smallShift}`);
  assert.ok(bigShift > 2 * bigHome, `expanded: home ${bigHome}, shifted ${bigShift}`);
  // Uniform routing would leave 89/384 = 23% cold whatever the map; the fitted map does much better at home.
  assert.ok(bigHome < 0.5 * (89 / 384), `expanded home cold share ${bigHome}`);
});

test('expansion rejects an expert count that is not a multiple of the trace\'s', () => {
  assert.throws(() => expansion(fixture, { layers: 16, experts: 100 }), (e: unknown) => e instanceof ResidencyError && /multiple/.test(e.message));
  assert.throws(() => expansion(fixture, { layers: 16, experts: 384, skew: [1, 1] }), (e: unknown) => e instanceof ResidencyError && /skew/.test(e.message));
});
