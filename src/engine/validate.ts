// Checks a generation request against the model before it is queued; errors name the field.
import { ResidencyError } from '../errors.ts';
import type { ModelSpec } from '../model/spec.ts';
import type { GenerationRequest } from './types.ts';

function bad(field: string, message: string): ResidencyError {
  return new ResidencyError('BAD_REQUEST', `${field}: ${message}`);
}

const isTokenId = (v: unknown, vocab: number): boolean => Number.isInteger(v) && (v as number) >= 0 && (v as number) < vocab;

export function validateRequest(r: GenerationRequest, spec: ModelSpec): void {
  if (typeof r.id !== 'string') throw bad('id', 'expected a string');
  const ids = r.promptIds;
  if (!Array.isArray(ids) || ids.length === 0) throw bad('promptIds', 'expected a non-empty array of token ids');
  const badId = ids.findIndex((t) => !isTokenId(t, spec.vocabSize));
  if (badId >= 0) throw bad(`promptIds[${badId}]`, `${ids[badId]} is not a token id in [0, ${spec.vocabSize})`);
  if (ids.length >= spec.maxPositions) {
    throw bad('promptIds', `${ids.length} tokens leave no room to generate: the model holds ${spec.maxPositions} positions`);
  }
  const s = r.sampling;
  if (typeof s !== 'object' || s === null) throw bad('sampling', 'expected an object');
  if (!Number.isFinite(s.temperature) || s.temperature < 0) throw bad('sampling.temperature', `${s.temperature}: expected a number >= 0 (0 = greedy)`);
  if (!Number.isFinite(s.topP) || s.topP <= 0 || s.topP > 1) throw bad('sampling.topP', `${s.topP}: expected a number in (0, 1]`);
  if (!Number.isInteger(s.maxTokens) || s.maxTokens < 1) throw bad('sampling.maxTokens', `${s.maxTokens}: expected an integer >= 1`);
  if (s.seed !== undefined && (!Number.isInteger(s.seed) || s.seed < 0)) throw bad('sampling.seed', `${s.seed}: expected an integer >= 0`);
  const optional = (field: string, v: number | undefined, ok: (x: number) => boolean, expected: string) => {
    if (v !== undefined && (typeof v !== 'number' || !ok(v))) throw bad(`sampling.${field}`, `${v}: expected ${expected}`);
  };
  optional('topK', s.topK, (x) => Number.isInteger(x) && x >= 0, 'an integer >= 0 (0 = off)');
  optional('minP', s.minP, (x) => x >= 0 && x <= 1, 'a number in [0, 1] (0 = off)');
  optional('presencePenalty', s.presencePenalty, (x) => x >= -2 && x <= 2, 'a number in [-2, 2]');
  optional('frequencyPenalty', s.frequencyPenalty, (x) => x >= -2 && x <= 2, 'a number in [-2, 2]');
  optional('repetitionPenalty', s.repetitionPenalty, (x) => x > 0 && x <= 10, 'a number in (0, 10] (1 = off)');
  optional('logprobs', s.logprobs, (x) => Number.isInteger(x) && x >= 0 && x <= 20, 'an integer in 0..20');
  if (s.stopTokenIds !== undefined) {
    if (!Array.isArray(s.stopTokenIds)) throw bad('sampling.stopTokenIds', 'expected an array of token ids');
    const i = s.stopTokenIds.findIndex((t) => !isTokenId(t, spec.vocabSize));
    if (i >= 0) throw bad(`sampling.stopTokenIds[${i}]`, `${s.stopTokenIds[i]} is not a token id in [0, ${spec.vocabSize})`);
  }
}
