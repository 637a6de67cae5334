// dump_counts from an HTTP client (remote): a plain name in the residency folder, never one of its own
// files, never through a link, no folders made, and no absolute path in the error.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, lstatSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fakeBackend } from './fake-backend.ts';
import { ResidencyDriver } from './residency-driver.ts';

function setup() {
  const root = mkdtempSync(join(tmpdir(), 'dump-remote-'));
  const dir = join(root, 'rd');
  const driver = new ResidencyDriver({ backend: fakeBackend(), dir, log: () => {}, frozen: true });
  driver.afterStep({ step: 0, tokens: 1, counted: true, durationNs: 1000 }); // telemetry files exist from the start
  return { root, dir, driver, done: () => rmSync(root, { recursive: true, force: true }) };
}

test('remote dump_counts refuses the folder\'s own files, nested names and dot names; the files are untouched', () => {
  const { dir, driver, done } = setup();
  try {
    for (const f of ['swaps.jsonl', 'telemetry.jsonl', 'steps.json', 'control.json', 'GO']) writeFileSync(join(dir, f), `keep ${f}\n`);
    for (const name of ['swaps.jsonl', 'telemetry.jsonl', 'steps.json', 'control.json', 'GO', 'go', 'Steps.JSON', 'control.json.applied', 'sub/x.json', '../x.json', '.hidden', '/tmp/x.json', 'a\u0000b']) {
      const r = driver.control({ freeze: false, dump_counts: name }, { remote: true });
      assert.ok(!r.ok && /^dump_counts: /.test(r.error), `${JSON.stringify(name)}: ${JSON.stringify(r)}`);
      assert.ok(!r.ok && !r.error.includes(dir), `the error does not show the folder: ${!r.ok && r.error}`);
      assert.equal(driver.controller.frozen, true, 'a refused dump changes nothing');
    }
    for (const f of ['swaps.jsonl', 'telemetry.jsonl', 'steps.json', 'control.json', 'GO']) assert.equal(readFileSync(join(dir, f), 'utf8'), `keep ${f}\n`, f);
    assert.ok(!existsSync(join(dir, 'sub')), 'no folder was made');
    const ok = driver.control({ dump_counts: 'counts-1.json' }, { remote: true });
    assert.ok(ok.ok, JSON.stringify(ok));
    assert.equal(JSON.parse(readFileSync(join(dir, 'counts-1.json'), 'utf8')).version, 1);
  } finally {
    done();
  }
});

test('remote dump_counts does not follow a symbolic link out of the folder, nor write into a FIFO', () => {
  const { root, dir, driver, done } = setup();
  try {
    const outside = join(root, 'outside.txt');
    writeFileSync(outside, 'precious\n');
    symlinkSync(outside, join(dir, 'link.json'));
    const r = driver.control({ dump_counts: 'link.json' }, { remote: true });
    assert.ok(!r.ok && /symbolic link/.test(r.error), JSON.stringify(r));
    assert.ok(!r.ok && !r.error.includes(root), `no absolute path: ${!r.ok && r.error}`);
    assert.equal(readFileSync(outside, 'utf8'), 'precious\n');
    assert.ok(lstatSync(join(dir, 'link.json')).isSymbolicLink());
    execFileSync('mkfifo', [join(dir, 'pipe.json')]);
    const f = driver.control({ dump_counts: 'pipe.json' }, { remote: true }); // would block forever if opened plainly
    assert.ok(!f.ok && /FIFO|regular/.test(f.error), JSON.stringify(f));
  } finally {
    done();
  }
});

test('the control file may dump anywhere, but not over the residency folder\'s own files', () => {
  const { root, dir, driver, done } = setup();
  try {
    writeFileSync(join(dir, 'swaps.jsonl'), 'keep\n');
    const r = driver.control({ dump_counts: 'swaps.jsonl' });
    assert.ok(!r.ok && /own files/.test(r.error));
    assert.equal(readFileSync(join(dir, 'swaps.jsonl'), 'utf8'), 'keep\n');
    assert.ok(driver.control({ dump_counts: join(root, 'elsewhere', 'c.json') }).ok);
  } finally {
    done();
  }
});

test('remote dump_counts without a residency folder is refused (it would land in the working directory)', () => {
  const driver = new ResidencyDriver({ backend: fakeBackend(), log: () => {}, frozen: true });
  const r = driver.control({ dump_counts: 'counts.json' }, { remote: true });
  assert.ok(!r.ok && /no residency folder/.test(r.error));
});

test('the control file\'s dump_counts: a FIFO is refused without hanging; a link, an alias of the folder or a hard link to its own files is refused by identity (in a child with a kill timer)', async () => {
  const root = mkdtempSync(join(tmpdir(), 'dump-local-'));
  try {
    const dir = join(root, 'rd');
    // Built in a child: a blocking open of a FIFO never returns, and no timer in the same process could fire.
    const script = `
      import { writeFileSync, symlinkSync, linkSync, mkdirSync } from 'node:fs';
      import { execFileSync } from 'node:child_process';
      import { join } from 'node:path';
      import { fakeBackend } from ${JSON.stringify(new URL('./fake-backend.ts', import.meta.url).href)};
      import { ResidencyDriver } from ${JSON.stringify(new URL('./residency-driver.ts', import.meta.url).href)};
      const dir = ${JSON.stringify(dir)};
      const root = ${JSON.stringify(root)};
      const driver = new ResidencyDriver({ backend: fakeBackend(), dir, log: () => {}, frozen: true });
      driver.afterStep({ step: 0, tokens: 1, counted: true, durationNs: 1000 });
      driver.close();
      execFileSync('mkfifo', [join(root, 'pipe.json')]);
      symlinkSync(join(dir, 'telemetry.jsonl'), join(root, 'tele-link.json'));
      symlinkSync(dir, join(root, 'alias'));
      linkSync(join(dir, 'swaps.jsonl'), join(root, 'swaps-hardlink.json'));
      const out = {};
      for (const p of [join(root, 'pipe.json'), join(root, 'tele-link.json'), join(root, 'alias', 'telemetry.jsonl'), join(root, 'alias', 'Swaps.jsonl'), join(root, 'swaps-hardlink.json'), join(root, 'alias', 'steps.json')]) {
        const r = driver.control({ dump_counts: p });
        out[p.slice(root.length + 1)] = r.ok ? 'ok' : r.error;
      }
      out.fine = driver.control({ dump_counts: join(root, 'alias', 'counts.json') }).ok;
      console.log(JSON.stringify(out));`;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (s: string) => { out += s; });
    child.stderr.setEncoding('utf8').on('data', (s: string) => { err += s; });
    let killed = false;
    const timer = setTimeout(() => { killed = true; child.kill('SIGKILL'); }, 30_000);
    await new Promise((resolve) => child.once('exit', resolve));
    clearTimeout(timer);
    assert.equal(killed, false, 'dump_counts hung on the FIFO');
    const r = JSON.parse(out) as Record<string, string | boolean>;
    assert.match(String(r['pipe.json']), /FIFO/, err);
    assert.match(String(r['tele-link.json']), /symbolic link/);
    for (const k of ['alias/telemetry.jsonl', 'swaps-hardlink.json', 'alias/steps.json']) assert.match(String(r[k]), /own files/, k);
    assert.equal(r.fine, true, 'a new file through the alias is fine');
    const tele = readFileSync(join(dir, 'telemetry.jsonl'), 'utf8');
    assert.ok(tele.split('\n').filter(Boolean).every((l) => 'v' in JSON.parse(l)) && !tele.includes('"cumulative"'), 'telemetry.jsonl is still the record');
    assert.ok(!readFileSync(join(dir, 'swaps.jsonl'), 'utf8').includes('"cumulative"'), 'swaps.jsonl is still the record');
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
