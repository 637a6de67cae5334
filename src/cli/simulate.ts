// `residency simulate`: replay traces through one residency policy and print cold share, T90, swaps, tok/s.
import { parseArgs } from 'node:util';
import { ResidencyError } from '../errors.ts';
import { loadCountsDump } from '../residency/files.ts';
import { parseBudgets, type Budgets } from '../residency/policy.ts';
import { priorFromDump } from '../residency/prior.ts';
import type { Geometry } from '../sim/policies/policy.ts';
import { policyFactory, POLICY_NAMES, type PolicyOptions } from '../sim/policies/registry.ts';
import { phaseTable } from '../sim/report.ts';
import { runPolicy } from '../sim/run.ts';
import { prepare, type SimOptions } from '../sim/setup.ts';
import type { CliCommand } from './command.ts';

export const SIM_FLAGS = {
  traces: { type: 'string' },
  phases: { type: 'string', default: 'en+code:3000,de+ja:3000,en+code:3000' },
  hot: { type: 'string', default: '49' },
  users: { type: 'string', default: '1' },
  seed: { type: 'string', default: '1' },
  map: { type: 'string' },
  fit: { type: 'string' },
  'seed-from': { type: 'string' },
  profile: { type: 'string' },
  'drain-every': { type: 'string' },
  'half-life': { type: 'string' },
  'swaps-per-step': { type: 'string' },
  budgets: { type: 'string' },
  inserts: { type: 'string' },
  'oracle-window': { type: 'string' },
  'copies-in-flight': { type: 'string' },
  prior: { type: 'string' },
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

export const SIM_HELP = `  --traces DIR|FILE     (required) fixture trace dir (index.json + .bin or .bin.gz), a dir of .jsonl traces, or one
                        .jsonl (the tiny-moe fixture's, in a checkout: fixtures/tiny-moe/traces)
  --phases SPEC         "en+code_js:3000,de+ja:3000": domains joined by +, steps per phase ("code" = code_*);
                        "recorded" replays engine-recorded .jsonl traces step for step (one phase per file)
  --hot N               hot experts per layer (default 49)
  --users N             concurrent users, one token each per step (default 1)
  --seed N              document-order seed (default 1)
  --map MAP.json        boot map; else --fit DOMAINS fits one (top-H of those traces); else experts 0..H-1
  --seed-from DOMAINS   traces the seed policy's map is fitted on (default: every domain of the protocol)
  --profile NAME        h200-pcie | gb300-c2c | sidecar (default: all)
  --drain-every N, --half-life N (tokens), --swaps-per-step N   adaptive budgets (defaults: the controller's)
  --budgets JSON        any adaptive budgets as a control file gives them, e.g. '{"swaps_per_layer_per_drain":4}'
                        (over the flags above)
  --inserts N           copy-on-miss inserts per step for lru/lfu/lfru (default 8)
  --oracle-window N     steps per oracle window (default 512)
  --copies-in-flight N  adaptive, lru, lfu, lfru: moves in the background as the CUDA banks make them, N row copies
                        queued at once (the banks' default is 4), each done by the next step (a copy-on-miss policy's
                        hot set followed as bench:tiered follows it); default: moves land at once (static and
                        seed never move; the oracles' moves are free by definition)
  --prior COUNTS.json   adaptive: seed prior from a counts dump of the traces' geometry (budget prior_picks_per_expert, default 1)
  --json                print the report as JSON`;

function int(v: string | undefined, flag: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n)) throw new ResidencyError('BAD_ARGUMENT', `--${flag} must be an integer, got '${v}'`);
  return n;
}

/** --budgets JSON, checked as the controller checks its budgets (unknown keys and values out of range refused by name). */
function budgetsFlag(text: string): Partial<Budgets> {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new ResidencyError('BAD_ARGUMENT', `--budgets: expected a JSON object of budgets, e.g. '{"drain_every":16}', got '${text}'`);
  }
  return parseBudgets(json, '--budgets', 'BAD_ARGUMENT');
}

type SimValues = { [K in keyof typeof SIM_FLAGS]?: (typeof SIM_FLAGS)[K]['type'] extends 'boolean' ? boolean : string };

export function simOptions(v: SimValues): SimOptions {
  // No default: a path relative to the working folder would only work from inside a checkout.
  if (v.traces === undefined) {
    throw new ResidencyError('BAD_ARGUMENT', '--traces DIR|FILE is required: the routing traces to replay (a fixture trace dir, a dir of .jsonl traces ' +
      'from `residency trace`, or one .jsonl; in a checkout of this repository the tiny-moe fixture is fixtures/tiny-moe/traces)');
  }
  const budgets: Partial<Budgets> = {};
  const drain = int(v['drain-every'], 'drain-every');
  const half = int(v['half-life'], 'half-life');
  const sps = int(v['swaps-per-step'], 'swaps-per-step');
  if (drain !== undefined) Object.assign(budgets, { drain_every: drain });
  if (half !== undefined) Object.assign(budgets, { half_life_tokens: half });
  if (sps !== undefined) Object.assign(budgets, { swaps_per_step: sps });
  if (v.budgets !== undefined) Object.assign(budgets, budgetsFlag(v.budgets));
  return {
    traces: v.traces, phases: v.phases!, hot: int(v.hot, 'hot')!, users: int(v.users, 'users')!, seed: int(v.seed, 'seed')!,
    map: v.map, fit: v.fit, seedFrom: v['seed-from'], profile: v.profile, budgets,
    insertsPerStep: int(v.inserts, 'inserts'), oracleWindow: int(v['oracle-window'], 'oracle-window') ?? 512,
    copiesInFlight: copiesFlag(v['copies-in-flight']),
  };
}

function copiesFlag(v: string | undefined): number | undefined {
  const n = int(v, 'copies-in-flight');
  if (n !== undefined && n < 1) throw new ResidencyError('BAD_ARGUMENT', `--copies-in-flight must be an integer >= 1, got '${v}'`);
  return n;
}

/** Policy options with --prior's counts added (checked against the traces' geometry), or as they were. */
export function withPrior(o: PolicyOptions, path: string | undefined, g: Geometry): PolicyOptions {
  if (path === undefined) return o;
  return { ...o, prior: priorFromDump(loadCountsDump(path), { layers: g.layers, experts: g.experts }, `--prior ${path}`) };
}

export const simulateCommand: CliCommand = {
  name: 'simulate',
  async run(argv) {
    const { values } = parseArgs({ args: argv, options: { ...SIM_FLAGS, policy: { type: 'string', default: 'adaptive' } }, strict: true });
    if (values.help) {
      console.log(`usage: residency simulate [--policy ${POLICY_NAMES.join('|')}] [options]\n${SIM_HELP}`);
      return 0;
    }
    const { input, policyOptions } = prepare(simOptions(values));
    const report = runPolicy(policyFactory(values.policy, withPrior(policyOptions, values.prior, input.geometry)), input);
    if (values.json) {
      console.log(JSON.stringify(report, null, 1));
    } else {
      console.log(phaseTable([report], input.profiles.map((p) => p.name)));
      console.log(`\n${report.policy}: ${report.steps} steps, ${report.tokens} tokens, cold share ${(report.coldShare * 100).toFixed(2)}%, swaps ${report.swaps}, copies ${report.copies}, refused ${report.refused}`);
    }
    return 0;
  },
};
