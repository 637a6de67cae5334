// The device's argmax keys (kernels/common.cuh argmax_key) decoded on the host.

/**
 * Decodes device argmax keys (kernels/common.cuh argmax_key: the logit's order-preserving bits, then
 * 0xffffffff - index; larger wins), the best of `n` 64-bit keys from `at` (in keys' 32-bit words, little
 * endian). A row of no key (all NaN: every key 0) gives 0, as argmax does.
 */
export function bestArgmaxKey(words: Uint32Array, at: number, n: number): number {
  let hi = 0;
  let lo = 0;
  for (let i = 0; i < n; i++) {
    const h = words[at + 2 * i + 1]!, l = words[at + 2 * i]!;
    if (h > hi || (h === hi && l > lo)) {
      hi = h;
      lo = l;
    }
  }
  return hi === 0 && lo === 0 ? 0 : 0xffffffff - lo;
}

/** Row `row`'s argmax from device keys copied to host bytes, `blocks` 64-bit keys a row (bestArgmaxKey). */
export function argmaxOfRow(keys: Uint8Array, row: number, blocks: number): number {
  return bestArgmaxKey(new Uint32Array(keys.buffer, keys.byteOffset, keys.byteLength >> 2), 2 * blocks * row, blocks);
}
