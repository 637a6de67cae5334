// `residency compare`: every policy on the same protocol; writes a markdown table, JSON and an SVG chart.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { policyFactory, POLICY_NAMES } from '../sim/policies/registry.ts';
import { coldShareSvg, phaseTable } from '../sim/report.ts';
import { runPolicy } from '../sim/run.ts';
import { prepare } from '../sim/setup.ts';
import type { CliCommand } from './command.ts';
import { SIM_FLAGS, SIM_HELP, simOptions, withPrior } from './simulate.ts';
import { checkFolderPath, makeFolder } from '../util/folders.ts';

export const compareCommand: CliCommand = {
  name: 'compare',
  async run(argv) {
    const { values } = parseArgs({
      args: argv,
      options: { ...SIM_FLAGS, out: { type: 'string', default: 'out/compare' }, policies: { type: 'string', default: POLICY_NAMES.join(',') } },
      strict: true,
    });
    if (values.help) {
      console.log(`usage: residency compare [--out DIR] [--policies a,b,...] [options]\n${SIM_HELP}`);
      return 0;
    }
    checkFolderPath(values.out, '--out'); // before the (long) runs: a kernel-filesystem path fails at once
    const prepared = prepare(simOptions(values));
    const input = prepared.input;
    const policyOptions = withPrior(prepared.policyOptions, values.prior, input.geometry);
    const reports = values.policies.split(',').map((name) => runPolicy(policyFactory(name.trim(), policyOptions), input));
    const profiles = input.profiles.map((p) => p.name);
    const title = `cold share per ${reports[0]?.windowSteps ?? 64} steps, ${values.phases}, hot ${values.hot}, users ${values.users}`;
    const md = [`# compare: ${values.phases}`, '', `hot ${values.hot}/${input.geometry.experts} per layer, ${values.users} user(s), seed ${values.seed}, traces ${values.traces}`, '',
      phaseTable(reports, profiles), '', '![cold share](coldshare.svg)', ''].join('\n');
    makeFolder(values.out, '--out');
    writeFileSync(join(values.out, 'compare.md'), md);
    writeFileSync(join(values.out, 'compare.json'), JSON.stringify({ protocol: { ...values }, reports }, null, 1));
    writeFileSync(join(values.out, 'coldshare.svg'), coldShareSvg(reports, title));
    if (values.json) console.log(JSON.stringify(reports, null, 1));
    else console.log(`${phaseTable(reports, profiles)}\n\nwrote ${join(values.out, 'compare.md')}, compare.json, coldshare.svg`);
    return 0;
  },
};
