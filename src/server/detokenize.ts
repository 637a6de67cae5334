// Token ids -> text deltas as they arrive, holding back what might still change: an incomplete UTF-8
// character (the decoder shows U+FFFD) or text that could be the start of a stop string.

import type { ServerTokenizer } from './types.ts';

export class TextAssembler {
  private readonly ids: number[] = [];
  // Offsets as in vLLM's incremental detokenizer: decode a short window so each token costs O(1).
  private prefixOffset = 0;
  private readOffset = 0;
  /** All text decoded so far (including held-back text). */
  private text = '';
  /** How much of `text` has been handed out. */
  private emitted = 0;
  private readonly maxStop: number;
  /** Set when a stop string matched: the text ends before it and nothing more is emitted. */
  stopped = false;

  constructor(
    private readonly tokenizer: ServerTokenizer,
    private readonly stops: readonly string[],
  ) {
    this.maxStop = stops.reduce((m, s) => Math.max(m, s.length), 0);
  }

  /** Adds one generated token; returns the text that is now safe to send (may be ''). */
  push(tokenId: number): string {
    if (this.stopped) return '';
    if (this.tokenizer.eosTokenIds.includes(tokenId)) return ''; // EOS ends the text; it is not part of it
    this.ids.push(tokenId);
    const prefix = this.tokenizer.decode(this.ids.slice(this.prefixOffset, this.readOffset));
    const full = this.tokenizer.decode(this.ids.slice(this.prefixOffset));
    if (full.length > prefix.length && !full.endsWith('\uFFFD')) {
      this.text += full.slice(prefix.length);
      this.prefixOffset = this.readOffset;
      this.readOffset = this.ids.length;
    }
    return this.release(false);
  }

  /** The sequence ended: returns everything still held back (a trailing partial character included). */
  finish(): string {
    if (this.stopped) return '';
    const prefix = this.tokenizer.decode(this.ids.slice(this.prefixOffset, this.readOffset));
    const full = this.tokenizer.decode(this.ids.slice(this.prefixOffset));
    if (full.length > prefix.length) this.text += full.slice(prefix.length);
    this.readOffset = this.prefixOffset = this.ids.length;
    return this.release(true);
  }

  /** The whole text handed out so far. */
  get output(): string {
    return this.text.slice(0, this.emitted);
  }

  private release(final: boolean): string {
    if (this.maxStop > 0) {
      // A stop string can only begin in the part not yet handed out (or straddle its edge).
      const from = Math.max(0, this.emitted - this.maxStop + 1);
      let cut = -1;
      for (const s of this.stops) {
        const at = this.text.indexOf(s, from);
        if (at >= 0 && (cut < 0 || at < cut)) cut = at;
      }
      if (cut >= 0) {
        const out = this.text.slice(this.emitted, cut);
        this.text = this.text.slice(0, cut);
        this.emitted = cut;
        this.stopped = true;
        return out;
      }
    }
    let safe = this.text.length;
    if (!final) safe -= this.heldForStop();
    if (safe <= this.emitted) return '';
    const out = this.text.slice(this.emitted, safe);
    this.emitted = safe;
    return out;
  }

  /** Length of the longest suffix of the text that is a proper prefix of some stop string. */
  private heldForStop(): number {
    let held = 0;
    for (const s of this.stops) {
      for (let n = Math.min(s.length - 1, this.text.length); n > held; n--) {
        if (this.text.endsWith(s.slice(0, n))) {
          held = n;
          break;
        }
      }
    }
    return held;
  }
}
