// The engine's one seam to the residency system: which steps are counted, and what runs between steps.

export interface StepReport {
  /** Steps since the engine started (0-based). */
  readonly step: number;
  /** Tokens fed in this step (all sequences). */
  readonly tokens: number;
  /** Whether the step's picks were counted. */
  readonly counted: boolean;
  /**
   * Wall time of the step in nanoseconds: from its start, or from the end of the step before when it was
   * submitted earlier and ran ahead (EngineOptions.runAhead), so steps that overlap are not counted twice.
   */
  readonly durationNs: number;
}

export interface ResidencyHook {
  /** Count this step's picks? (counting on, and at most count_tmax tokens: prefill chunks are noise.) */
  countStep(tokens: number): boolean;
  /** Between steps: drain the counter when due, decide, apply at most the per-step swap budget. */
  afterStep(report: StepReport): void;
}
