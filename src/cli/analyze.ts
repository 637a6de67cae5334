// `residency analyze`: cold share, T90 after each shift, swaps per minute and step-time percentiles of a live run.
import { parseArgs } from 'node:util';
import { ResidencyError } from '../errors.ts';
import { analyzeLiveRun, readLiveRun } from '../sim/analyze.ts';
import type { CliCommand } from './command.ts';

export const analyzeCommand: CliCommand = {
  name: 'analyze',
  async run(argv) {
    const { values } = parseArgs({
      args: argv,
      options: { 'residency-dir': { type: 'string' }, shifts: { type: 'string' }, json: { type: 'boolean', default: false }, help: { type: 'boolean', short: 'h', default: false } },
      strict: true,
    });
    if (values.help || !values['residency-dir']) {
      console.log('usage: residency analyze --residency-dir DIR [--shifts STEP,STEP,...] [--json]\n' +
        '  --shifts   steps where traffic shifted (marked); without it shifts are detected as cold-share jumps');
      return values.help ? 0 : 2;
    }
    const marks = values.shifts?.split(',').map((s) => {
      const n = Number(s);
      if (!Number.isInteger(n) || n < 0) throw new ResidencyError('BAD_ARGUMENT', `--shifts: '${s}' is not a step number`);
      return n;
    });
    const live = readLiveRun(values['residency-dir']);
    const a = analyzeLiveRun(live, marks);
    // Restarts append to the same folder; only the last run is analyzed (each starts at step 0).
    if (live.runs > 1 && !values.json) console.log(`${live.runs} runs in this folder: the last${live.run ? ` (${live.run})` : ''} is analyzed`);
    // A broken line (a write cut short by a full disk) is skipped, not fatal; say which.
    if (live.broken.length > 0) {
      const shown = live.broken.slice(0, 5).map((b) => `${b.where} (${b.why})`).join('; ');
      console.error(`skipped ${live.broken.length} broken line${live.broken.length > 1 ? 's' : ''}: ${shown}${live.broken.length > 5 ? '; ...' : ''}`);
    }
    if (values.json) { console.log(JSON.stringify(a, null, 1)); return 0; }
    const pct = (x: number) => `${(x * 100).toFixed(2)}%`;
    console.log(`${a.drains} drains over ${a.steps} steps, ${a.seconds.toFixed(1)} s: cold share ${pct(a.coldShare)}`);
    console.log(`swaps applied ${a.swapsApplied}, refused ${a.swapsRefused}, ${a.swapsPerMinute.toFixed(1)} per minute`);
    for (const s of a.shifts) {
      console.log(`shift at step ${s.step} (${s.how}): peak ${pct(s.peak)} -> converged ${pct(s.converged)}, T90 ${s.t90Steps ?? '-'} steps${s.t90Seconds !== null ? ` / ${s.t90Seconds.toFixed(2)} s` : ''}`);
    }
    if (a.swapSteps && a.swapFreeSteps) {
      console.log(`steps with swaps: ${a.swapSteps.count}, p50 ${a.swapSteps.p50Ms.toFixed(2)} ms, p99 ${a.swapSteps.p99Ms.toFixed(2)} ms`);
      console.log(`swap-free steps:  ${a.swapFreeSteps.count}, p50 ${a.swapFreeSteps.p50Ms.toFixed(2)} ms, p99 ${a.swapFreeSteps.p99Ms.toFixed(2)} ms`);
    }
    console.log('cold share timeline (step: share):');
    const every = Math.max(1, Math.ceil(a.timeline.length / 40));
    console.log(a.timeline.filter((_, i) => i % every === 0).map((x) => `${x.step}: ${pct(x.coldShare)}`).join('  '));
    return 0;
  },
};
