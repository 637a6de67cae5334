// The registry of model families beyond qwen3_moe (config.ts, architecture.ts and convert.ts keep that one):
// per model_type, its config parser, its tensor map and its weight assembly.

import type { Architecture, ModelSpec } from '../spec.ts';
import type { ModelWeights, RawTensor } from '../weights.ts';
import type { WeightOptions } from './common.ts';
import { mixtralMoeNames, mixtralTensors, mixtralWeights, parseMixtral } from './mixtral.ts';
import type { MoeNames } from '../tensor-names.ts';
import { olmoeTensors, olmoeWeights, parseOlmoe } from './olmoe.ts';
import { deepseekV3Tensors, deepseekV3Weights, parseDeepseekV3 } from './deepseek-v3.ts';
import { gptOssMoeNames, gptOssTensors, gptOssWeights, parseGptOss } from './gpt-oss.ts';

export interface Family {
  /** config.json's object -> a frozen spec, refusing by name what the engine does not compute. */
  parse(json: unknown, name: string): ModelSpec;
  /** Every tensor the spec needs with its shape (checked before any weight is read). */
  tensors(spec: ModelSpec): Map<string, readonly number[]>;
  /** The float32 weights from validated raw tensors (`onTensor`: progress, raw bytes per tensor). */
  weights(spec: ModelSpec, raw: ReadonlyMap<string, RawTensor>, onTensor?: (name: string, bytes: number) => void, opts?: WeightOptions): ModelWeights;
  /**
   * Its routed experts can stay in the checkpoint for the banks (WeightOptions.streamExperts: one SwiGLU
   * tensor triple an expert). gpt-oss's stack every expert in a layer's tensors, gate and up interleaved: loaded.
   */
  readonly streamsExperts: boolean;
  /** Layer l's router and routed experts, when they are not named as qwen3_moe's (mlp.gate, mlp.experts.E.*_proj). */
  moeNames?(l: number): MoeNames;
}

const FAMILIES: Partial<Record<Architecture, Family>> = {
  mixtral: { parse: parseMixtral, tensors: mixtralTensors, weights: mixtralWeights, moeNames: mixtralMoeNames, streamsExperts: true },
  olmoe: { parse: parseOlmoe, tensors: olmoeTensors, weights: olmoeWeights, streamsExperts: true },
  deepseek_v3: { parse: parseDeepseekV3, tensors: deepseekV3Tensors, weights: deepseekV3Weights, streamsExperts: true },
  gpt_oss: { parse: parseGptOss, tensors: gptOssTensors, weights: gptOssWeights, moeNames: gptOssMoeNames, streamsExperts: false },
};

/** The family of a model_type other than qwen3_moe, if the engine has one. */
export function familyOf(modelType: unknown): Family | undefined {
  return typeof modelType === 'string' && modelType !== 'qwen3_moe' && Object.hasOwn(FAMILIES, modelType) ? FAMILIES[modelType as Architecture] : undefined;
}

/** model_types the engine computes, for messages. */
export function supportedModelTypes(): string[] {
  return ['qwen3_moe', ...Object.keys(FAMILIES)];
}
