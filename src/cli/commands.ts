// The registry of subcommands (explicit: no scanning of file names). Add one import and one entry per command.
import type { CliCommand } from './command.ts';

export const commands: CliCommand[] = [];
