// The shape of one CLI subcommand.

export interface CliCommand {
  readonly name: string;
  /** Runs with the arguments after the command name; returns the exit code. */
  run(argv: string[]): Promise<number | void>;
}
