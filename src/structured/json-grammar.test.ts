// The JSON recognizer and schema shapes: what they accept and refuse, character by character.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ANY, advance, initialState, isComplete } from './json-grammar.ts';
import { SchemaError, compileSchema } from './schema.ts';
import { JsonConstraint } from './vocab-constraint.ts';

const full = (shape: Parameters<typeof initialState>[0], text: string) => {
  const s = advance(initialState(shape), text);
  return s !== null && isComplete(s);
};
const prefixOk = (shape: Parameters<typeof initialState>[0], text: string) => advance(initialState(shape), text) !== null;

test('free JSON: whole values complete, broken ones are refused at the first bad character', () => {
  for (const t of ['{}', '{"a": [1, -2.5e3, true, null, "x\\n\\u00e9"], "b": {"c": false}}', '[ ]', '"s"', 'true']) assert.ok(full(ANY, t), t);
  for (const t of ['{a}', '{"a" 1}', '[1,]', '{"a":01}', '"\u0001"', '{"a":1}}', 'tru', '[1 2]']) assert.ok(!full(ANY, t) && (!prefixOk(ANY, t) || !full(ANY, t)), t);
  assert.equal(prefixOk(ANY, '{"a":1}x'), false, 'nothing after the value');
  assert.equal(prefixOk(ANY, '{ "a": 1 }'), true, 'single spaces between tokens');
  assert.equal(prefixOk(ANY, '{  '), false, 'whitespace is at most one space');
  assert.equal(prefixOk(ANY, '{\n'), false, 'compact: no newlines');
  assert.ok(full(ANY, '{"a": "x\n y  z"}'.replace('\n', '\\n')), 'inside strings anything goes');
  assert.equal(prefixOk(ANY, ' {'), false, 'the value starts the output');
});

test('schema shapes: keys in order, typed values, enums, integers', () => {
  const shape = compileSchema({ type: 'object', properties: { name: { type: 'string' }, age: { type: 'integer' }, tags: { type: 'array', items: { enum: ['a', 'b"c'] } } }, required: ['name'], additionalProperties: false });
  assert.ok(full(shape, '{"name": "Ada", "age": 36, "tags": ["a", "b\\"c"]}'));
  assert.ok(!prefixOk(shape, '{"age"'), 'keys come in schema order');
  assert.ok(!prefixOk(shape, '{"name": 1'), 'a string where the schema says string');
  assert.ok(!prefixOk(shape, '{"name": "x", "age": 3.5'), 'an integer has no fraction');
  assert.ok(!prefixOk(shape, '{"name": "x", "age": 3, "tags": ["c'), 'enum');
  assert.ok(!prefixOk(shape, '{"name": "x"}'), 'every property is emitted');
  assert.throws(() => compileSchema({ type: 'string', pattern: 'a+' }), (e: unknown) => e instanceof SchemaError && /schema\.pattern/.test(e.message));
  assert.throws(() => compileSchema({ anyOf: [] }), /anyOf/);
});

test('the vocabulary constraint masks every token that cannot continue, and completes', () => {
  const vocab = ['', '{', '}', '"', 'a', '":', ' 1', '{"a": 1}', 'x', '\uFFFD', '}}'];
  const c = new JsonConstraint(vocab, { t: 'object', props: null });
  const row = new Float32Array(vocab.length);
  c.mask(row, 0, vocab.length);
  const allowed = [...row].flatMap((v, i) => (v === -Infinity ? [] : [i]));
  assert.deepEqual(allowed, [1, 7], "only '{' and a whole object may start an object");
  for (const id of [1, 3, 4, 9, 5, 6]) c.accept(id);
  assert.equal(c.complete, false);
  row.fill(0);
  c.mask(row, 0, vocab.length);
  assert.equal(row[2], 0);
  assert.equal(row[10], -Infinity, 'no text after the value closes');
  c.accept(2);
  assert.equal(c.complete, true);
});
