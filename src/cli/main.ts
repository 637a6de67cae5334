// The `residency` command line: an explicit registry of subcommands, each in its own module.
import { commands } from './commands.ts';
import { PACKAGE_NAME, VERSION } from '../version.ts';

function usage(): string {
  const lines = ['usage: residency <command> [options]', '', 'commands:'];
  for (const c of commands) lines.push(`  ${c.name.padEnd(10)} ${c.summary}`);
  lines.push('', 'Run `residency <command> --help` for its options; `residency --version` prints the version.');
  return lines.join('\n');
}

const [name, ...rest] = process.argv.slice(2);
if (name === '--version' || name === '-V' || name === 'version') {
  console.log(`${PACKAGE_NAME} ${VERSION}`);
  process.exit(0);
}
if (!name || name === '--help' || name === '-h' || name === 'help') {
  console.log(usage());
  process.exit(name ? 0 : 2);
}
const entry = commands.find((c) => c.name === name);
if (!entry) {
  console.error(`residency: unknown command '${name}'\n\n${usage()}`);
  process.exit(2);
}
try {
  const command = await entry.load();
  const code = await command.run(rest);
  process.exitCode = code ?? 0;
} catch (err) {
  const e = err as Error & { code?: string };
  console.error(`residency ${name}: ${e.code ? `[${e.code}] ` : ''}${e.message}`);
  if (process.env.RESIDENCY_DEBUG) console.error(e.stack);
  process.exitCode = 1;
}
