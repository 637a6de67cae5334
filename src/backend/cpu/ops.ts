// Every CPU reference op in one import (what GPU conformance tests compare against), by concern:
// linear algebra, attention, MoE.
export * from './linalg.ts';
export * from './attention-ops.ts';
export * from './moe-ops.ts';
