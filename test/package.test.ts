// The package as users get it: `npm pack`, installed into an empty folder without dev dependencies, then
// imported (JavaScript only: no tsx or TypeScript there), its types checked by a consumer, and its bin run.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { loadModel } from '../src/model/load.ts';
import { generate } from '../src/api/generate.ts';

const root = resolve(import.meta.dirname, '..');
const npm = (args: string[], cwd: string) => execFileSync('npm', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

test('npm pack -> install in an empty folder (no dev dependencies) -> import, types and bin work', { timeout: 240_000 }, async () => {
  if (!existsSync(join(root, 'lib/index.mjs'))) execFileSync(process.execPath, ['scripts/build-lib.mjs'], { cwd: root });
  const dir = mkdtempSync(join(tmpdir(), 'pkg-'));
  try {
    // lib/ is already built (npm test builds it first): packing need not build it again.
    const packed = JSON.parse(npm(['pack', '--ignore-scripts', '--json', '--pack-destination', dir], root))[0];
    const files: string[] = packed.files.map((f: { path: string }) => f.path);
    assert.ok(files.includes('LICENSE') && files.includes('lib/index.mjs') && files.includes('lib/types/index.d.ts'));
    assert.ok(files.includes('models/tiny-moe/chat_template.jinja'));
    assert.deepEqual(files.filter((f) => /\.ts$/.test(f) && !f.endsWith('.d.ts')), [], 'no TypeScript sources');
    assert.deepEqual(files.filter((f) => /^(src|test|bench|kernels|scripts|dist|fixtures)\//.test(f)), [], 'only what runs');
    const app = join(dir, 'app');
    execFileSync('mkdir', ['-p', app]);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
    npm(['install', '--omit=dev', '--omit=optional', '--prefer-offline', '--no-audit', '--no-fund', join(dir, packed.filename)], app);
    const installed = readdirSync(join(app, 'node_modules'));
    assert.ok(installed.includes('moe-residency'));
    assert.ok(!installed.includes('tsx') && !installed.includes('typescript') && !installed.includes('esbuild'), `no dev dependencies: ${installed.join(' ')}`);

    writeFileSync(join(app, 'main.mjs'), [
      "import { loadModel, generate, TINY_MODEL_DIR, VERSION, Controller, POLICY_NAMES, startServing } from 'moe-residency';",
      'const model = await loadModel(TINY_MODEL_DIR);',
      "const g = await generate(model, 'The ls command', { maxTokens: 8 });",
      "console.log(JSON.stringify({ text: g.text, version: VERSION, controller: typeof Controller, policies: POLICY_NAMES.length, serve: typeof startServing }));",
    ].join('\n'));
    const out = JSON.parse(execFileSync(process.execPath, ['main.mjs'], { cwd: app, encoding: 'utf8' }));
    const model = await loadModel(join(root, 'models/tiny-moe'));
    assert.equal(out.text, (await generate(model, 'The ls command', { maxTokens: 8 })).text, 'the installed package generates what the sources do');
    assert.equal(out.controller, 'function');
    assert.equal(out.serve, 'function');

    // A TypeScript consumer type-checks against the declarations (the compiler is this repo's).
    writeFileSync(join(app, 'use.ts'), "import { loadModel, generate, type Generation } from 'moe-residency';\nconst m = await loadModel('x');\nconst g: Generation = await generate(m, 'hi', { maxTokens: 2 });\nexport const n: number = g.tokens.length;\n");
    writeFileSync(join(app, 'tsconfig.json'), JSON.stringify({ compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', target: 'ES2022', strict: true, noEmit: true, skipLibCheck: false, types: [], typeRoots: [join(root, 'node_modules/@types')] }, files: ['use.ts'] }));
    const tsc = spawnSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', app], { encoding: 'utf8' });
    assert.equal(tsc.status, 0, `consumer type check:\n${tsc.stdout}${tsc.stderr}`);

    const bin = join(app, 'node_modules/.bin/residency');
    assert.equal(execFileSync(bin, ['--version'], { encoding: 'utf8' }).trim(), `moe-residency ${out.version}`);
    const t0 = performance.now();
    assert.match(execFileSync(bin, ['--help'], { encoding: 'utf8' }), /serve/);
    const ms = performance.now() - t0;
    assert.ok(ms < 1500, `--help took ${ms.toFixed(0)} ms`); // loose for a loaded CI machine
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
