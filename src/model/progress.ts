// A stderr progress line for loading large checkpoints; silent unless stderr is a terminal or forced.
//
//   const progress = progressLine({ label: `loading ${dir}` });
//   try { model = await loadModel(dir, { onProgress: progress.onProgress }); } finally { progress.finish(); }

export interface ProgressLine {
  /** Pass as loadModel's onProgress. */
  readonly onProgress: (done: number, total: number, what: string) => void;
  /** Ends the line (call once loading finished or failed). */
  finish(): void;
}

export interface ProgressOptions {
  label?: string;
  /** Write even when the stream is not a TTY (then one plain line per 10%, no carriage returns). */
  force?: boolean;
  stream?: NodeJS.WritableStream & { isTTY?: boolean; columns?: number };
  /** Minimum milliseconds between redraws on a TTY. */
  intervalMs?: number;
  now?: () => number;
}

function mb(bytes: number): string {
  return (bytes / 1e6).toFixed(1);
}

export function progressLine(opts: ProgressOptions = {}): ProgressLine {
  const stream = opts.stream ?? process.stderr;
  const tty = stream.isTTY === true;
  const enabled = tty || opts.force === true;
  const label = opts.label ?? 'loading';
  const interval = opts.intervalMs ?? 100;
  const now = opts.now ?? (() => Date.now());
  let lastDraw = -Infinity;
  let lastDecile = -1;
  let drew = false;
  let t0 = -1;

  const onProgress = (done: number, total: number, what: string): void => {
    if (!enabled) return;
    const pct = total > 0 ? Math.min(100, Math.floor((done / total) * 100)) : 100;
    const t = now();
    if (t0 < 0) t0 = t;
    const rate = t > t0 ? ` ${(done / ((t - t0) / 1000) / 1e9).toFixed(2)} GB/s` : '';
    const text = `${label} ${String(pct).padStart(3)}% ${mb(done)}/${mb(total)} MB${rate} ${what}`;
    if (tty) {
      const t = now();
      if (t - lastDraw < interval && done < total) return; // redraw at most every `interval` ms
      lastDraw = t;
      const width = Math.max(20, (stream.columns ?? 80) - 1);
      stream.write(`\r${text.slice(0, width).padEnd(width)}`);
      drew = true;
    } else {
      const decile = Math.floor(pct / 10);
      if (decile === lastDecile) return;
      lastDecile = decile;
      stream.write(`${text}\n`);
    }
  };
  return {
    onProgress,
    finish() {
      if (tty && drew) stream.write('\n');
      drew = false;
    },
  };
}
