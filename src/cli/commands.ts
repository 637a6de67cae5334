// The registry of subcommands (explicit: no scanning of file names): one entry per command, its summary
// here. A command's module is imported only when it runs, so `residency --help` loads none of them.
import type { CliCommand } from './command.ts';

export interface CommandEntry {
  readonly name: string;
  readonly summary: string;
  load(): Promise<CliCommand>;
}

export const commands: readonly CommandEntry[] = [
  { name: 'simulate', summary: 'replay routing traces through a residency policy (cold share, T90, swaps, modelled tok/s)', load: async () => (await import('./simulate.ts')).simulateCommand },
  { name: 'compare', summary: 'run every residency policy on one traffic protocol; write a table and a cold-share chart', load: async () => (await import('./compare.ts')).compareCommand },
  { name: 'analyze', summary: "compute cold share, T90, swaps/min and swap-step p99 from a live run's residency telemetry", load: async () => (await import('./analyze.ts')).analyzeCommand },
  { name: 'fit-map', summary: 'fit a seed map (top-H experts per layer) from a counts dump', load: async () => (await import('./fit-map.ts')).fitMapCommand },
  { name: 'generate', summary: 'generate tokens for one prompt (CPU or CUDA backend), optionally with the residency controller live', load: async () => (await import('./generate.ts')).generateCommand },
  { name: 'serve', summary: 'serve an OpenAI-compatible API with live residency control, /metrics and a dashboard', load: async () => (await import('./serve.ts')).serveCommand },
  { name: 'trace', summary: 'record the routing of your own text (teacher-forced) as a JSONL trace for residency simulate', load: async () => (await import('./trace.ts')).traceCommand },
];
