// How deep a JSON text nests, found in one pass over its characters before it is parsed: servers cap
// nesting (a parser, or any walk of the parsed value, costs depth on a stack or worse), and a cap
// checked on the text costs one scan whatever the shape.

/**
 * The offset of the first `[` or `{` that takes `text` past `cap` levels of nesting, or -1 when it stays
 * within them. Brackets inside strings are skipped (escapes included). Linear in the text's length; the
 * text need not be valid JSON (the parser judges that after).
 */
export function nestingPastCap(text: string, cap: number): number {
  let depth = 0;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // A string: to its closing quote, stepping over escapes.
      for (i++; i < n; i++) {
        const s = text.charCodeAt(i);
        if (s === 0x5c) i++;
        else if (s === 0x22) break;
      }
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > cap) return i;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return -1;
}
