// Device-run tests (not part of `npm test`: they need an NVIDIA GPU). Bundled by `npm run build` into
// dist/gpu-tests.mjs and run on the GPU machine with `node dist/gpu-tests.mjs` (or `npm run test:gpu`).
import { after } from 'node:test';
import { writeReport } from './model.gpu.ts';
import './swaps.gpu.ts';
import './serve.gpu.ts';
import './lifecycle.gpu.ts';
import './long-context.gpu.ts';
import './real-size.gpu.ts';
import './real-int4.gpu.ts';
import './family-parity.gpu.ts';
import './tiered-real.gpu.ts';
import './backend-conformance.gpu.ts';
import './paged.gpu.ts';
import './ops.gpu.ts';

after(() => writeReport(process.env['OUT']));
