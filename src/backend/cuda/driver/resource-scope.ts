// A disposer stack for driver resources: each acquisition records its release right after it succeeds, so
// a constructor that fails half way releases exactly what it got, and dispose() releases everything, last
// acquired first. Pure (no driver import): CI tests it without a GPU.
import { ResidencyError } from '../../../errors.ts';

/** One release that threw: what it was releasing and the error. */
export interface ReleaseFailure {
  readonly scope: string;
  readonly what: string;
  readonly error: unknown;
}

export type ReleaseFailureSink = (failure: ReleaseFailure) => void;

/** Default sink: one warning line per failed release (a release failure must not hide the rest). */
export const warnReleaseFailure: ReleaseFailureSink = (f) => {
  const msg = f.error instanceof Error ? f.error.message : String(f.error);
  console.warn(`${f.scope}: releasing ${f.what} failed: ${msg}`);
};

interface Entry {
  readonly resource: unknown;
  readonly what: string;
  readonly release: () => void;
}

export class ResourceScope {
  private readonly entries: Entry[] = [];
  private isClosed = false;

  constructor(
    readonly name: string,
    private readonly onFailure: ReleaseFailureSink = warnReleaseFailure,
  ) {}

  /** Resources held now (releases not yet run). */
  get size(): number {
    return this.entries.length;
  }

  get closed(): boolean {
    return this.isClosed;
  }

  /**
   * Records how to release `resource`, just acquired, and returns it. Adopting into a closed scope (a
   * resource acquired after dispose) releases it at once and throws: nothing is left without an owner.
   */
  adopt<T>(resource: T, what: string, release: (resource: T) => void): T {
    if (this.isClosed) {
      this.runGuarded({ resource, what, release: () => release(resource) });
      throw new ResidencyError('INTERNAL', `${this.name}: ${what} acquired after dispose()`);
    }
    this.entries.push({ resource, what, release: () => release(resource) });
    return resource;
  }

  /**
   * Releases one adopted resource now (a KV cache when its sequence closes) and forgets it. Unlike close(),
   * a failing release throws to the caller, as the direct call would; the resource is forgotten either way
   * (a failed free is not retried at dispose).
   */
  releaseEarly(resource: unknown): void {
    const i = this.entries.findLastIndex((e) => e.resource === resource);
    if (i < 0) throw new ResidencyError('INTERNAL', `${this.name}: releasing a resource it does not hold`);
    const [e] = this.entries.splice(i, 1);
    e!.release();
  }

  /** Acquires and adopts in one step; nothing is recorded when `acquire` throws. */
  acquire<T>(what: string, acquire: () => T, release: (resource: T) => void): T {
    return this.adopt(acquire(), what, release);
  }

  /** A cleanup step tied to no handle (dispose() waits for the stream before the frees this way). */
  defer(what: string, release: () => void): void {
    this.adopt(Symbol(what), what, () => release());
  }

  /**
   * Runs every release, last recorded first, each guarded: a release that throws is reported to the sink
   * and the rest still run. Idempotent: a second call releases nothing and returns []. Never throws.
   */
  close(): ReleaseFailure[] {
    this.isClosed = true;
    const failures: ReleaseFailure[] = [];
    for (let e = this.entries.pop(); e !== undefined; e = this.entries.pop()) {
      const f = this.runGuarded(e);
      if (f) failures.push(f);
    }
    return failures;
  }

  /**
   * For a constructor's catch: releases everything acquired so far and returns `cause` so the caller can
   * `throw scope.unwind(e)` (the original error wins; release failures go to the sink).
   */
  unwind(cause: unknown): unknown {
    this.close();
    return cause;
  }

  private runGuarded(e: Entry): ReleaseFailure | null {
    try {
      e.release();
      return null;
    } catch (error) {
      const f: ReleaseFailure = { scope: this.name, what: e.what, error };
      try {
        this.onFailure(f);
      } catch {
        // A sink that throws must not stop the releases either.
      }
      return f;
    }
  }
}
