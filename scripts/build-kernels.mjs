// Compiles kernels/*.cu ahead of time with nvcc into dist/kernels/<name>.fatbin: SASS for sm_90 plus
// compute_90 PTX (so a newer GPU can JIT it). The cuda backend loads these; nothing compiles at run time.
// Usage: node scripts/build-kernels.mjs [--optional] [--out DIR] [--force] [--no-compress]
//   --optional  when nvcc is absent, say so and exit 0 (the CPU package still builds); otherwise exit 1.
//   --no-compress  leave the device code uncompressed (nvcc compresses large fatbins; the build test reads the PTX).
// NVCC=/path/to/nvcc overrides the compiler (default: nvcc on PATH, then /usr/local/cuda/bin/nvcc).
import { existsSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { spawnSync } from 'node:child_process';

const root = resolve(new URL('..', import.meta.url).pathname);
const args = process.argv.slice(2);
const optional = args.includes('--optional');
const outIdx = args.indexOf('--out');
const outDir = outIdx >= 0 ? resolve(args[outIdx + 1]) : join(root, 'dist', 'kernels');
const ARCH = ['-gencode', 'arch=compute_90,code=sm_90', '-gencode', 'arch=compute_90,code=compute_90'];

function findNvcc() {
  // An explicit NVCC is the only candidate (no silent fallback to another compiler).
  const candidates = process.env.NVCC ? [process.env.NVCC] : ['nvcc', '/usr/local/cuda/bin/nvcc', '/usr/local/bin/nvcc'];
  for (const c of candidates) {
    const r = spawnSync(c, ['--version'], { encoding: 'utf8' });
    if (r.status === 0) return c;
  }
  return null;
}

// The host's expert lane (src/backend/cuda/host-lane/host_experts.c: threads computing cold experts beside the GPU) is C, built
// with the system's C compiler beside the fatbins; without one the lane is reported unavailable at run time.
function buildHostLane(dir) {
  const cc = process.env.CC || 'cc';
  const lane = join(root, 'src', 'backend', 'cuda', 'host-lane');
  const src = join(lane, 'host_experts.c');
  const out = join(dir, 'host_experts.so');
  const deps = [src, join(lane, 'fp8_dot.h'), join(lane, 'mxfp4_dot.h'), join(root, 'kernels', 'exact_math.cuh')];
  if (existsSync(out) && !args.includes('--force') && deps.every((f) => statSync(out).mtimeMs > statSync(f).mtimeMs)) return;
  if (spawnSync(cc, ['--version']).status !== 0) { console.log(`build-kernels: no C compiler (${cc}): the host expert lane is NOT built`); return; }
  mkdirSync(dir, { recursive: true });
  const r = spawnSync(cc, hostLaneFlags(src, out), { stdio: 'inherit' });
  if (r.status !== 0) { console.error('build-kernels: cc failed on src/backend/cuda/host-lane/host_experts.c'); process.exit(1); }
  console.log(`build-kernels: src/backend/cuda/host-lane/host_experts.c -> ${out}`);
}
/** The lane's compile line: no contraction of a multiply and an add (the sums must keep the GPU's order). */
function hostLaneFlags(src, out) {
  return ['-O3', '-std=gnu11', '-ffp-contract=off', '-fno-fast-math', '-fPIC', '-shared', '-pthread', '-o', out, src, '-lm'];
}
buildHostLane(outDir);

const nvcc = findNvcc();
if (!nvcc) {
  const msg = 'build-kernels: nvcc not found (set NVCC or install the CUDA toolkit); kernels NOT built';
  if (optional) { console.log(`${msg} (--optional: continuing; the cuda backend will report NOT_AVAILABLE)`); process.exit(0); }
  console.error(msg);
  process.exit(1);
}
mkdirSync(outDir, { recursive: true });
const srcDir = join(root, 'kernels');
const sources = readdirSync(srcDir).filter((f) => f.endsWith('.cu')).sort();
const headers = readdirSync(srcDir).filter((f) => f.endsWith('.cuh')).map((f) => statSync(join(srcDir, f)).mtimeMs);
const newestHeader = Math.max(0, ...headers);
let built = 0;
for (const src of sources) {
  const out = join(outDir, src.replace(/\.cu$/, '.fatbin'));
  const inPath = join(srcDir, src);
  // Rebuild when the source or any header is newer than the fatbin.
  if (existsSync(out) && !args.includes('--force')) {
    const t = statSync(out).mtimeMs;
    if (t > statSync(inPath).mtimeMs && t > newestHeader) continue;
  }
  const r = spawnSync(nvcc, ['-fatbin', '-O3', '-std=c++17', '-lineinfo', ...ARCH, ...(args.includes('--no-compress') ? ['-no-compress'] : []), '-o', out, inPath], { stdio: 'inherit' });
  if (r.status !== 0) { console.error(`build-kernels: nvcc failed on ${src}`); process.exit(1); }
  built++;
}
console.log(`build-kernels: ${built} of ${sources.length} kernel groups compiled with ${nvcc} -> ${outDir}`);
