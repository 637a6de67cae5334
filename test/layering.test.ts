// The layering of src/: imports point down. A module may import its own area and the areas of lower layers, never
// a higher layer or another area of its own layer. Read from every file's import lines (static, re-export, side
// effect and dynamic import() alike, tests and type-only imports included: a test's imports are its area's).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative, sep } from 'node:path';

/** Layers, lowest first; each entry an area of src/ (a top-level file or folder). */
const LAYERS: readonly (readonly string[])[] = [
  ['errors.ts', 'version.ts'], // what everything may use
  ['util'],
  ['residency', 'model'], // the residency core and the checkpoint reader: neither knows the other nor any backend
  ['backend'],
  ['engine'],
  ['sim', 'structured', 'api'], // the simulator (it runs the banks' move schedule), grammars, generate()
  ['server'],
  ['cli'], // the command line starts the server
  ['index.ts'], // the package's exports
];

const SRC = 'src';
const LAYER_OF = new Map(LAYERS.flatMap((areas, layer) => areas.map((a) => [a, layer] as const)));

function areaOf(file: string): string {
  return relative(SRC, file).split(sep)[0]!;
}

function sourceFiles(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) sourceFiles(p, out);
    else if (/\.(ts|mts|mjs|js)$/.test(name)) out.push(p);
  }
  return out;
}

/** The relative module specifiers `text` imports or re-exports. */
export function importedSpecifiers(text: string): string[] {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
  const out: string[] = [];
  for (const re of [/\bfrom\s+['"]([^'"]+)['"]/g, /\bimport\s+['"]([^'"]+)['"]/g, /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g]) {
    for (const m of code.matchAll(re)) if (m[1]!.startsWith('.')) out.push(m[1]!);
  }
  return out;
}

interface Edge { readonly from: string; readonly to: string; readonly fromArea: string; readonly toArea: string }

function importGraph(): Edge[] {
  const edges: Edge[] = [];
  for (const file of sourceFiles(SRC)) {
    for (const spec of importedSpecifiers(readFileSync(file, 'utf8'))) {
      const target = normalize(join(dirname(file), spec));
      if (!target.startsWith(SRC + sep)) continue; // package.json, dist/: outside the layering
      edges.push({ from: file, to: target, fromArea: areaOf(file), toArea: areaOf(target) });
    }
  }
  return edges;
}

/** Why an import breaks the layering, or null where it points down (or stays in its area). */
export function violation(fromArea: string, toArea: string): string | null {
  if (fromArea === toArea) return null;
  const from = LAYER_OF.get(fromArea), to = LAYER_OF.get(toArea);
  if (from === undefined) return `${fromArea} is in no layer (add it to LAYERS in test/layering.test.ts)`;
  if (to === undefined) return `${toArea} is in no layer (add it to LAYERS in test/layering.test.ts)`;
  if (to > from) return `${fromArea} (layer ${from}) imports ${toArea}, a higher layer (${to})`;
  if (to === from) return `${fromArea} imports ${toArea}, another area of its own layer (${from})`;
  return null;
}

test('every import in src/ points down the layers (model < backend < engine < server < cli; residency and model import only errors and util)', () => {
  const edges = importGraph();
  const bad = edges.flatMap((e) => {
    const why = violation(e.fromArea, e.toArea);
    return why ? [`${e.from} -> ${e.to}: ${why}`] : [];
  });
  assert.deepEqual(bad, []);
  // The scan sees the graph (a reader that found no imports would pass the check above vacuously).
  const seen = new Set(edges.map((e) => `${e.fromArea}>${e.toArea}`));
  for (const arrow of ['backend>model', 'engine>backend', 'server>engine', 'cli>server', 'backend>residency']) {
    assert.ok(seen.has(arrow), `no ${arrow} import found: the scan lost imports`);
  }
  for (const area of readdirSync(SRC)) assert.ok(LAYER_OF.has(area), `src/${area} is in no layer: add it to LAYERS`);
});

test('the layering rule: down is allowed; up, sideways within a layer, and areas with no layer are refused', () => {
  assert.equal(violation('server', 'engine'), null);
  assert.equal(violation('backend', 'backend'), null);
  assert.match(violation('model', 'backend')!, /model \(layer 2\) imports backend, a higher layer \(3\)/);
  assert.match(violation('server', 'cli')!, /higher layer/);
  assert.match(violation('residency', 'model')!, /another area of its own layer/);
  assert.match(violation('residency', 'engine')!, /higher layer/);
  assert.match(violation('newthing', 'model')!, /newthing is in no layer/);
});

test('import lines are read in every form, comments ignored', () => {
  const text = [
    "import { a } from '../backend/a.ts';",
    "import type {\n  B,\n} from '../engine/b.ts';",
    "export { c } from './c.ts';",
    "import './side-effect.ts';",
    "const d = await import('../server/d.ts');",
    "// import { e } from '../cli/e.ts';",
    "/* import { f } from '../cli/f.ts'; */",
    "import { g } from 'node:fs';",
  ].join('\n');
  assert.deepEqual(importedSpecifiers(text).sort(), ['../backend/a.ts', '../engine/b.ts', '../server/d.ts', './c.ts', './side-effect.ts']);
});
