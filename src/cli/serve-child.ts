// Test helper: `residency serve` as a child process (src/cli/serve.test.ts, src/cli/prior.test.ts). It waits
// for the "serving ... on URL" line and always ends with the child gone: a body that throws leaves no server.
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import type { Readable } from 'node:stream';

export interface ServeChild {
  readonly child: ChildProcessByStdio<null, null, Readable>;
  /** The base URL from the "serving" line. */
  readonly url: string;
  /** stderr up to and including the "serving" line. */
  readonly stderr: string;
  /** The exit code, once the child exits. */
  readonly exited: Promise<number | null>;
}

/** Runs `bin/residency.js serve ARGS`, hands the served child to `body`, then SIGKILLs it if still running. */
export async function withServe<T>(args: readonly string[], body: (s: ServeChild) => Promise<T>): Promise<T> {
  const child = spawn(process.execPath, ['bin/residency.js', 'serve', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  try {
    let stderr = '';
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr.setEncoding('utf8');
      child.stderr.on('data', (s: string) => {
        stderr += s;
        const m = /serving \S+ on (http:\/\/\S+)/.exec(stderr);
        if (m) resolve(m[1]!);
      });
      child.once('exit', () => reject(new Error(`serve exited early: ${stderr}`)));
    });
    return await body({ child, url, stderr, exited });
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
  }
}
