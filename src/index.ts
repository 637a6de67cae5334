// moe-residency's programmatic API (the package's main export): load a model, generate, serve it, drive
// the residency controller, replay traces through the simulator. Everything else is internal.
import { fileURLToPath } from 'node:url';

/** The shipped tiny Qwen3-MoE checkpoint (models/tiny-moe in the package). */
export const TINY_MODEL_DIR: string = fileURLToPath(new URL('../models/tiny-moe/', import.meta.url));

export { VERSION } from './version.ts';
export { ResidencyError } from './errors.ts';

// Models and generation.
export { loadModel, type LoadedModel, type LoadOptions } from './model/load.ts';
export { generate, type GenerateOptions, type Generation } from './api/generate.ts';
export { createBackend, BACKEND_NAMES, type BackendName, type CreateBackendOptions } from './backend/registry.ts';
export type { Backend, KvPool, KvCacheDtype, SequenceChunk } from './backend/backend.ts';
export { DirectSequences } from './backend/sequences.ts';
export { createEngine, Engine, type EngineOptions } from './engine/engine.ts';
export { runToCompletion, type Completion } from './engine/complete.ts';
export type { GenerationEngine, GenerationRequest, GenerationEvent, SamplingParams, FinishReason, TokenConstraint, KvCacheStats } from './engine/types.ts';

// Serving (what `residency serve` runs).
export { startServing, defaultHot, type ServeOptions, type Serving } from './server/boot.ts';

// The residency core: the controller and its budgets, maps.
export { Controller, type ControllerOptions, type DrainReport, type ControllerStats } from './residency/controller.ts';
export type { Budgets } from './residency/policy.ts';
export type { RowMap } from './residency/rowmap.ts';

// The simulator: traces -> a policy -> cold share, T90, churn, modelled step time.
export { loadTraces } from './sim/traces/load.ts';
export { prepare as prepareSimulation, type SimOptions } from './sim/setup.ts';
export { policyFactory, POLICY_NAMES, type PolicyName, type PolicyOptions } from './sim/policies/registry.ts';
export { runPolicy, type PolicyReport } from './sim/run.ts';
