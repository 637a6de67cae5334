// The one spelling of a field's place in untrusted JSON, for every error that names a field: `messages[0].content`.

/** `a.b[3].c` from a path (a zod issue's); `root` for the empty path (the whole value). */
export function fieldPath(path: readonly PropertyKey[], root = ''): string {
  let s = '';
  for (const p of path) s += typeof p === 'number' ? `[${p}]` : s === '' ? String(p) : `.${String(p)}`;
  return s || root;
}
