// The residency folder's own files, named once, and the rule for a dump name an HTTP client may give.

/** What the driver and the telemetry writer keep in the residency folder. */
export const FOLDER_FILES = Object.freeze({
  telemetry: 'telemetry.jsonl',
  swaps: 'swaps.jsonl',
  steps: 'steps.json',
  control: 'control.json',
  go: 'GO',
  map: 'map.json',
});

/**
 * Whether `name` (a bare file name) is one of the folder's own files or their by-products (control.json's
 * consumed copies, steps.json's temporary): a dump written there would destroy the record. Compared
 * without case, for case-insensitive file systems.
 */
export function isFolderFile(name: string): boolean {
  const n = name.toLowerCase();
  return Object.values(FOLDER_FILES).some((f) => n === f.toLowerCase() || n.startsWith(`${f.toLowerCase()}.`));
}

/** A plain file name: letters, digits, '_', '-', '.', not starting with '.', at most 128 characters. */
const PLAIN_NAME = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;

/**
 * Over HTTP, `dump_counts` must be a plain file name in the residency folder that is not one of its own
 * files; returns why not, or null when it is fine. (The control file is the operator's and may write anywhere.)
 */
export function remoteDumpNameProblem(name: string): string | null {
  if (!PLAIN_NAME.test(name)) {
    return `over HTTP give a plain file name (letters, digits, '_', '-', '.'; no folder, not starting with '.'; at most 128 characters), got '${name.slice(0, 140).replace(/[^\x20-\x7e]/g, '?')}'`;
  }
  if (isFolderFile(name)) return `'${name}' is one of the residency folder's own files (${Object.values(FOLDER_FILES).join(', ')}); pick another name`;
  return null;
}
