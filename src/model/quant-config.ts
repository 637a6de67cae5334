// config.json's quantization_config: which stored formats the engine computes with (block FP8, MXFP4, and the 4-bit
// GPTQ, AWQ and compressed-tensors: int4-config.ts), parsed once into the spec, each bad or unsupported field refused by name.
import { ResidencyError } from '../errors.ts';
import { INT4_METHODS, parseInt4, type Int4Spec } from './int4-config.ts';

/** How a checkpoint's linear weights are stored (absent from the spec: float tensors only). */
export type QuantSpec =
  /** float8_e4m3fn values with a float32 `weight_scale_inv` per [blockSize[0]][blockSize[1]] block. */
  | { readonly method: 'fp8'; readonly blockSize: readonly [number, number]; readonly notConvert: readonly string[] }
  /** gpt-oss experts: `*_blocks` / `*_scales` (E2M1 pairs, an E8M0 scale per 32 values). */
  | { readonly method: 'mxfp4'; readonly notConvert: readonly string[] }
  /** 4-bit integers with a scale (and zero point) a group of a row, repacked at load into quant.ts's Int4Matrix. */
  | Int4Spec;

/** The methods each model_type computes with. */
export type QuantMethod = QuantSpec['method'];

function bad(type: string, field: string, message: string, got: unknown): ResidencyError {
  return new ResidencyError('BAD_CONFIG', `config.json (${type}): field quantization_config.${field}: ${message} (got ${JSON.stringify(got) ?? 'nothing'})`);
}

function unsupported(type: string, field: string, message: string): ResidencyError {
  return new ResidencyError('UNSUPPORTED_MODEL', `config.json (${type}): quantization_config.${field}: ${message}`);
}

/**
 * The quantization of a `type` checkpoint from its config's quantization_config (absent or null: none).
 * `allowed` lists the methods that model_type computes with.
 */
export function parseQuantization(type: string, q: unknown, allowed: readonly QuantMethod[]): QuantSpec | undefined {
  if (q === undefined || q === null) return undefined;
  if (typeof q !== 'object' || Array.isArray(q)) {
    throw new ResidencyError('BAD_CONFIG', `config.json (${type}): field quantization_config: expected an object (got ${JSON.stringify(q)})`);
  }
  const o = q as Record<string, unknown>;
  const method = o['quant_method'];
  if (typeof method !== 'string') throw bad(type, 'quant_method', 'expected a string', method);
  if (!(allowed as readonly string[]).includes(method)) {
    const names = allowed.map((m) => `"${m}"`);
    const list = names.length > 0 ? `only ${names.length > 1 ? `${names.slice(0, -1).join(', ')} and ${names.at(-1)}` : names[0]}` : 'use a BF16/F16/F32 checkpoint';
    throw unsupported(type, 'quant_method', `"${method}" is not supported for ${type}; ${list}`);
  }
  if ((INT4_METHODS as readonly string[]).includes(method)) return parseInt4(type, method as Int4Spec['method'], o);
  const notConvert = o['modules_to_not_convert'] ?? [];
  if (!Array.isArray(notConvert) || !notConvert.every((m) => typeof m === 'string' && m.length > 0)) {
    throw bad(type, 'modules_to_not_convert', 'expected an array of module names', notConvert);
  }
  if (method === 'mxfp4') return Object.freeze({ method: 'mxfp4' as const, notConvert: Object.freeze([...notConvert]) });
  const fmt = o['fmt'] ?? 'e4m3';
  if (fmt !== 'e4m3') throw unsupported(type, 'fmt', `${JSON.stringify(fmt)} is not supported; only "e4m3" (float8_e4m3fn)`);
  const act = o['activation_scheme'] ?? 'dynamic';
  // Activations stay float32 on the CPU; a static scheme would come with activation scales to apply.
  if (act !== 'dynamic') throw unsupported(type, 'activation_scheme', `${JSON.stringify(act)} is not supported; only "dynamic"`);
  const block = o['weight_block_size'];
  if (block === undefined || block === null) {
    throw unsupported(type, 'weight_block_size', 'absent: per-tensor FP8 scales are not supported; only block scales (e.g. [128, 128])');
  }
  if (!Array.isArray(block) || block.length !== 2 || !block.every((b) => Number.isSafeInteger(b) && (b as number) > 0)) {
    throw bad(type, 'weight_block_size', 'expected [rows, cols], two positive integers', block);
  }
  return Object.freeze({ method: 'fp8' as const, blockSize: Object.freeze([block[0] as number, block[1] as number] as const), notConvert: Object.freeze([...notConvert]) });
}

/** Whether the spec's weights are 4-bit integers (GPTQ, AWQ, compressed-tensors). */
export function isInt4(q: QuantSpec | undefined): q is Int4Spec {
  return q !== undefined && (INT4_METHODS as readonly string[]).includes(q.method);
}

/**
 * Whether module `name` (a tensor name without its last part) is listed in modules_to_not_convert: an
 * entry equal to the module or to one of its dotted prefixes, `*` matching any run of characters
 * ("model.layers.*.self_attn" covers every layer's q/k/v/o).
 */
export function notConverted(q: QuantSpec, name: string): boolean {
  const parts = name.split('.');
  return q.notConvert.some((p) => {
    const re = new RegExp(`^${p.split('*').map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`);
    for (let n = parts.length; n > 0; n--) if (re.test(parts.slice(0, n).join('.'))) return true;
    return false;
  });
}
