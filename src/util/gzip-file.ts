// Files a checkout keeps gzipped (the fixtures' traces and prompts) read like plain ones: a file whose bytes
// start with gzip's magic is unzipped whole, any other is returned as it is.
import { readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';

/** The file's bytes, gunzipped when they are gzip. */
export function readFileUnzipped(path: string): Buffer {
  const b = readFileSync(path);
  return b.length >= 2 && b[0] === 0x1f && b[1] === 0x8b ? gunzipSync(b) : b;
}
