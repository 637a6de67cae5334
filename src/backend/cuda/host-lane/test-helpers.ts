// The host lane's C library built for tests (host-lane/host_experts.c, with the system's C compiler and build-kernels'
// flags) and the comparison of its experts with the spec, bit for bit (host-experts.test.ts, host-experts-mxfp4.test.ts).
import { after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expertSpec } from './lane-spec.ts';
import { loadHostLaneLib, type HostLaneLib } from './lane.ts';
import { laneFormat, type LaneRow } from './lane-row.ts';
import { f32With, hex, int } from './float-bits-test-helpers.ts';
import type { CudaDriver } from '../driver/driver.ts';

const cc = process.env.CC || 'cc';
/** Why the C library cannot be built here (a test's skip), or false. */
export const noCompiler = spawnSync(cc, ['--version']).status !== 0 ? `no C compiler (${cc}): host-lane/host_experts.c cannot be built here` : false;
const root = fileURLToPath(new URL('../../../..', import.meta.url));
// (Made when this module loads, at the top level of the test file that imports it: its `after` is the file's.)
const libDir = mkdtempSync(join(tmpdir(), 'host-experts-'));
after(() => rmSync(libDir, { recursive: true, force: true }));
const libs = new Map<string, Promise<HostLaneLib>>();
/** Built once a process, with scripts/build-kernels.mjs's hostLaneFlags (and `defines`, each its own folder). */
export function lib(defines: readonly string[] = []): Promise<HostLaneLib> {
  const key = defines.join(' ');
  if (!libs.has(key)) {
    libs.set(key, (async () => {
      const dir = join(libDir, `lib${libs.size}`);
      mkdirSync(dir);
      const src = join(root, 'src', 'backend', 'cuda', 'host-lane', 'host_experts.c'), out = join(dir, 'host_experts.so');
      const flags = ['-O3', '-std=gnu11', '-ffp-contract=off', '-fno-fast-math', '-fPIC', '-shared', '-pthread', ...defines.map((d) => `-D${d}`), '-o', out, src, '-lm'];
      const r = spawnSync(cc, flags, { encoding: 'utf8' });
      assert.equal(r.status, 0, `cc failed on host-lane/host_experts.c:\n${r.stderr}`);
      return loadHostLaneLib(dir);
    })());
  }
  return libs.get(key)!;
}
/** The build whose FP8 vector path widens by integer operations, as on a CPU without VBMI (this CPU may have it). */
export const libNoVbmi = (): Promise<HostLaneLib> => lib(['HE_FP8_NO_VBMI']);

export interface Expert { row: Uint8Array; at: LaneRow; H: number; I: number; x: Float32Array }

/** An expert's input: mostly 2^-8 .. 2^2, some zeros of both signs and values up to 2^11. */
export function randomInput(r: () => number, H: number): Float32Array {
  const x = new Float32Array(H);
  for (let k = 0; k < H; k++) {
    const u = r();
    x[k] = u < 0.05 ? 0 : u < 0.1 ? -0 : u < 0.13 ? f32With(r, int(r, 6, 10)) : f32With(r, int(r, -8, 1));
  }
  return x;
}

export function assertSameBits(got: Float32Array, want: Float32Array, what: string): void {
  const g = new Uint32Array(got.buffer, got.byteOffset, got.length), w = new Uint32Array(want.buffer, want.byteOffset, want.length);
  assert.equal(g.length, w.length);
  for (let i = 0; i < g.length; i++) {
    if (g[i] !== w[i]) assert.fail(`${what}[${i}]: C ${hex(got[i]!)}, spec ${hex(want[i]!)}`);
  }
}

/** Whether the vector path takes an expert of this format and shape (host_experts.c simd_shape). */
export const simdShape = (at: LaneRow, H: number, I: number): boolean => laneFormat(at) === 'mxfp4' || (H % 256 === 0 && I % 256 === 0);

/**
 * Both paths the shape allows against the spec, bit for bit (FP8: the vector path with both widenings); says whether
 * the vector path was compared.
 */
export async function checkExpert(e: Expert, what: string): Promise<{ simd: boolean }> {
  const L = await lib();
  const want = expertSpec(e.row, e.at, e.H, e.I, e.x);
  const plain = L.expert(e.row, e.at, e.H, e.I, e.x, false);
  assertSameBits(plain.h, want.h, `${what} scalar h`);
  assertSameBits(plain.y, want.y, `${what} scalar y`);
  const simd = L.simdAvailable() && simdShape(e.at, e.H, e.I);
  if (simd) {
    for (const [name, V] of e.at.scales ? [['simd', L], ['simd (integer widening)', await libNoVbmi()]] as const : [['simd', L]] as const) {
      const v = V.expert(e.row, e.at, e.H, e.I, e.x, true);
      assertSameBits(v.h, want.h, `${what} ${name} h`);
      assertSameBits(v.y, want.y, `${what} ${name} y`);
    }
  }
  return { simd };
}

/**
 * A threaded lane's surroundings without a GPU: each layer's cold bank a Buffer of `coldRows` of the experts' rows (layer
 * l's row c is experts[l x coldRows + c]), a driver whose mapped host memory (the mailbox) is a Buffer too, and
 * `bankOf(at)`, the lane's banks with the rows laid out as `at` says. The Buffers stay referenced by `kept`.
 */
export function laneBanks(l: HostLaneLib, experts: readonly Expert[], layers: number, hotRows: number, coldRows: number) {
  const { H, I } = experts[0]!, rowBytes = experts[0]!.row.length;
  const banks = Array.from({ length: layers }, (_, ly) => {
    const b = Buffer.alloc(coldRows * rowBytes);
    for (let c = 0; c < coldRows; c++) b.set(experts[ly * coldRows + c]!.row, c * rowBytes);
    return b;
  });
  const kept: Buffer[] = [...banks];
  const driver = {
    allocMappedHost(bytes: number) { const b = Buffer.alloc(bytes); kept.push(b); return { host: new Uint8Array(b.buffer, b.byteOffset, bytes), dev: 1n, hostPtr: l.address(b) }; },
    alloc: () => 2n, memsetD8: () => undefined, free: () => undefined, freeHost: () => undefined, htod: () => undefined,
    allocPinned: (bytes: number) => ({ host: new Uint8Array(bytes), hostPtr: 3n }), eventCreate: () => 4n, eventDestroy: () => undefined,
  } as unknown as CudaDriver;
  const bankOf = (at: LaneRow) => ({ hiddenSize: H, intermediate: I, layers, hotRows, coldRows, rowBytes, at, coldHost: banks.map((b) => l.address(b)) });
  return { rowBytes, driver, bankOf, kept };
}
