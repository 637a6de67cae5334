// Control: the control file / API command format, validated before anything changes.
import { z } from 'zod';
import { budgetsPatchSchema } from './policy.ts';
import { fieldPath } from '../util/field-path.ts';
import type { CountsDump } from './counts.ts';

/**
 * One control command (design.md section 4). Every field is optional; a file or API call may carry any mix.
 * Unknown keys are rejected, so a typo never passes silently.
 */
export const controlSchema = z.strictObject({
  /** true: stop deciding (queued adaptive swaps are cancelled); counting goes on. false: adapt. */
  freeze: z.boolean().optional(),
  /** false: steps are not counted at all (the EWMA, which ages by counted tokens, then holds as it is). */
  counting: z.boolean().optional(),
  /** true: forget the EWMA and start the window now, so adaptation starts from fresh counts. */
  baseline: z.boolean().optional(),
  /** true: freeze and queue the swaps that bring the boot map back (applied within the per-step budget). */
  restore_map: z.boolean().optional(),
  /** Write a counts dump to this path (the caller does the I/O; the controller builds the dump). */
  dump_counts: z.string().min(1).optional(),
  budgets: budgetsPatchSchema.optional(),
});

export type ControlCommand = z.infer<typeof controlSchema>;

/** The start signal the seeds use: adapt from fresh counts. A GO file means exactly this. */
export const GO_COMMAND: ControlCommand = Object.freeze({ freeze: false, baseline: true });

export type ControlResult =
  | {
      readonly ok: true;
      /** What changed, in words, for logs and API replies. */
      readonly changes: readonly string[];
      /** With dump_counts: the dump and where the caller should write it. */
      readonly dump?: { readonly path: string; readonly counts: CountsDump };
    }
  | { readonly ok: false; readonly error: string };

export type ParsedControl = { readonly ok: true; readonly command: ControlCommand } | { readonly ok: false; readonly error: string };

/** Validates a command (from JSON or a TypeScript caller); the error names the field and what was expected. */
export function parseControl(json: unknown): ParsedControl {
  const r = controlSchema.safeParse(json);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    const keys = issue.code === 'unrecognized_keys' ? ` (${issue.keys.join(', ')})` : '';
    return { ok: false, error: `${fieldPath(issue.path, '(root)')}: ${issue.message}${keys}` };
  }
  const command = r.data;
  if (command.restore_map && command.freeze === false) {
    return { ok: false, error: 'restore_map: cannot be combined with freeze: false (restoring freezes adaptation)' };
  }
  return { ok: true, command };
}

/** Parses control file text: JSON syntax errors are rejected like schema errors. */
export function parseControlText(text: string): ParsedControl {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    return { ok: false, error: `not JSON: ${printable((err as Error).message)}` };
  }
  const parsed = parseControl(json);
  return parsed.ok ? parsed : { ok: false, error: printable(parsed.error) };
}

/**
 * A message quoting file bytes, made safe for a log line: control characters (NUL, ESC, newlines) as
 * \\uXXXX escapes, and at most `max` characters. JSON.parse quotes the text it failed on, and a control
 * file may hold anything, terminal escapes included.
 */
export function printable(message: string, max = 300): string {
  const safe = message.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  return safe.length > max ? `${safe.slice(0, max)}... (${safe.length - max} more characters)` : safe;
}
