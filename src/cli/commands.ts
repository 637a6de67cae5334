// The registry of subcommands (explicit: no scanning of file names). Add one import and one entry per command.
import type { CliCommand } from './command.ts';
import { simulateCommand } from './simulate.ts';
import { compareCommand } from './compare.ts';
import { analyzeCommand } from './analyze.ts';
import { fitMapCommand } from './fit-map.ts';
import { generateCommand } from './generate.ts';
import { serveCommand } from './serve.ts';
import { traceCommand } from './trace.ts';

export const commands: CliCommand[] = [simulateCommand, compareCommand, analyzeCommand, fitMapCommand, generateCommand, serveCommand, traceCommand];
