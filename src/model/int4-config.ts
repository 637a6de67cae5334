// quantization_config of the three 4-bit formats users download (GPTQ, AWQ, compressed-tensors pack-quantized), parsed
// into one Int4Spec, and which linear modules each stores in 4 bits (int4Module), as the references decide it:
// GPTQ as vLLM's gptq.py / GPTQModel read it (bits, group_size, desc_act, sym, checkpoint_format, lm_head, dynamic,
// modules_in_block_to_quantize), AWQ as vLLM's awq.py (w_bit / bits, q_group_size / group_size, zero_point,
// modules_to_not_convert matched as substrings: is_layer_skipped_awq) and transformers' AwqConfig (version "gemm"),
// compressed-tensors as vLLM's compressed_tensors.py (config_groups' weights and targets, ignore with "re:" patterns,
// format "pack-quantized"). Every field the engine would compute differently under is refused by name.
import { ResidencyError } from '../errors.ts';

/** A checkpoint whose linear weights are 4-bit integers with a scale (and zero point) a group of a row. */
export interface Int4Spec {
  readonly method: 'gptq' | 'awq' | 'compressed-tensors';
  /** Values of a row one scale (and zero point) covers; 0: the whole row (group_size -1, strategy "channel"). */
  readonly groupSize: number;
  /** Zero points are stored (GPTQ sym false, AWQ); else every group's is 8. */
  readonly zeroPoints: boolean;
  /** Added to each stored GPTQ zero point: 1 for checkpoint_format "gptq" (v1 stores zero - 1), 0 for "gptq_v2". */
  readonly zeroOffset: number;
  /** modules_to_not_convert (GPTQ, AWQ): a linear whose name contains one stays as stored. */
  readonly notConvert: readonly string[];
  /** GPTQ modules_in_block_to_quantize, flattened: a decoder block's linears in 4 bits (null: all of them). */
  readonly inBlock: readonly string[] | null;
  /**
   * compressed-tensors: what its config groups target ("Linear", a module name, or "re:" and a Python regex matched
   * at the name's start) and what `ignore` leaves as stored; GPTQ: dynamic's "-:" patterns, as ignores.
   */
  readonly targets: readonly string[];
  readonly ignore: readonly string[];
}

export const INT4_METHODS = ['gptq', 'awq', 'compressed-tensors'] as const;

function bad(type: string, field: string, message: string, got: unknown): ResidencyError {
  return new ResidencyError('BAD_CONFIG', `config.json (${type}): field quantization_config.${field}: ${message} (got ${JSON.stringify(got) ?? 'nothing'})`);
}

function unsupported(type: string, field: string, message: string): ResidencyError {
  return new ResidencyError('UNSUPPORTED_MODEL', `config.json (${type}): quantization_config.${field}: ${message}`);
}

/** The first of `keys` that `o` has (two spellings of one field), or undefined. */
function either(o: Record<string, unknown>, ...keys: string[]): [string, unknown] {
  for (const k of keys) if (o[k] !== undefined && o[k] !== null) return [k, o[k]];
  return [keys[0]!, undefined];
}

function strings(type: string, field: string, v: unknown): string[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || !v.every((m) => typeof m === 'string' && m.length > 0)) throw bad(type, field, 'expected an array of module names', v);
  return [...v];
}

/** A group size: a positive integer, or -1 (a whole row: 0 here). */
function groupSizeOf(type: string, field: string, v: unknown): number {
  if (v === -1) return 0;
  if (!Number.isSafeInteger(v) || (v as number) <= 0) throw bad(type, field, 'expected a positive integer or -1', v);
  return v as number;
}

function fourBits(type: string, field: string, v: unknown): void {
  if (v !== 4) {
    if (typeof v !== 'number') throw bad(type, field, 'expected 4', v);
    throw unsupported(type, field, `${v}-bit weights are not supported; only 4`);
  }
}

/** A Python regex source checked to compile in JavaScript (the patterns in real configs mean the same in both). */
function pattern(type: string, field: string, source: string): string {
  try {
    new RegExp(source);
  } catch (e) {
    throw bad(type, field, `"${source}" is not a regular expression this engine reads (${(e as Error).message})`, source);
  }
  return source;
}

export function parseInt4(type: string, method: Int4Spec['method'], o: Record<string, unknown>): Int4Spec {
  if (method === 'gptq') return parseGptq(type, o);
  if (method === 'awq') return parseAwq(type, o);
  return parseCompressedTensors(type, o);
}

function parseGptq(type: string, o: Record<string, unknown>): Int4Spec {
  fourBits(type, 'bits', o['bits']);
  const groupSize = groupSizeOf(type, 'group_size', o['group_size']);
  const descAct = o['desc_act'] ?? false;
  if (typeof descAct !== 'boolean') throw bad(type, 'desc_act', 'expected a boolean', descAct);
  // Act-order groups follow g_idx, not the column order: a kernel would permute its input to keep a group's scale.
  if (descAct) throw unsupported(type, 'desc_act', 'true (act-order GPTQ) is not supported; only desc_act false, whose groups are consecutive columns');
  const sym = o['sym'] ?? true;
  if (typeof sym !== 'boolean') throw bad(type, 'sym', 'expected a boolean', sym);
  const format = o['checkpoint_format'] ?? 'gptq';
  if (format !== 'gptq' && format !== 'gptq_v2') throw unsupported(type, 'checkpoint_format', `${JSON.stringify(format)} is not supported; only "gptq" (zero points stored minus one) and "gptq_v2"`);
  if (o['lm_head'] === true) throw unsupported(type, 'lm_head', 'a 4-bit lm_head is not supported; only decoder-block linears');
  const packDtype = o['pack_dtype'] ?? 'int32';
  if (packDtype !== 'int32') throw unsupported(type, 'pack_dtype', `${JSON.stringify(packDtype)} is not supported; only "int32"`);
  // GPTQModel's per-module overrides: "-:pattern" leaves matching modules as stored; a "+:" override changes bits or groups.
  const dynamic = o['dynamic'] ?? {};
  if (typeof dynamic !== 'object' || dynamic === null || Array.isArray(dynamic)) throw bad(type, 'dynamic', 'expected an object of module patterns', dynamic);
  const ignore: string[] = [];
  for (const key of Object.keys(dynamic)) {
    if (!key.startsWith('-:')) throw unsupported(type, `dynamic["${key}"]`, 'per-module bits or group sizes are not supported; only "-:" patterns (modules left unquantized)');
    ignore.push(`re:${pattern(type, `dynamic["${key}"]`, key.slice(2))}`);
  }
  const blocks = o['modules_in_block_to_quantize'];
  let inBlock: string[] | null = null;
  if (blocks !== undefined && blocks !== null) {
    if (!Array.isArray(blocks) || !blocks.every((b) => Array.isArray(b) && b.every((m) => typeof m === 'string' && m.length > 0))) {
      throw bad(type, 'modules_in_block_to_quantize', 'expected an array of arrays of module names', blocks);
    }
    inBlock = (blocks as string[][]).flat();
  }
  return Object.freeze({
    method: 'gptq' as const, groupSize, zeroPoints: !sym, zeroOffset: format === 'gptq' ? 1 : 0,
    notConvert: Object.freeze(strings(type, 'modules_to_not_convert', o['modules_to_not_convert'])),
    inBlock: inBlock ? Object.freeze(inBlock) : null, targets: Object.freeze([]), ignore: Object.freeze(ignore),
  });
}

function parseAwq(type: string, o: Record<string, unknown>): Int4Spec {
  const [bitsKey, bits] = either(o, 'bits', 'w_bit');
  fourBits(type, bitsKey, bits);
  const [groupKey, group] = either(o, 'group_size', 'q_group_size');
  const groupSize = groupSizeOf(type, groupKey, group);
  const zeroPoint = o['zero_point'] ?? true;
  if (zeroPoint !== true) throw unsupported(type, 'zero_point', `${JSON.stringify(zeroPoint)} is not supported; only true (AWQ with zero points)`);
  // GEMV and the exllama / ipex layouts pack another way than the GEMM layout read here.
  const version = o['version'] ?? 'gemm';
  if (typeof version !== 'string' || version.toLowerCase() !== 'gemm') throw unsupported(type, 'version', `${JSON.stringify(version)} is not supported; only "gemm" (the GEMM packing)`);
  return Object.freeze({
    method: 'awq' as const, groupSize, zeroPoints: true, zeroOffset: 0,
    notConvert: Object.freeze(strings(type, 'modules_to_not_convert', o['modules_to_not_convert'])),
    inBlock: null, targets: Object.freeze([]), ignore: Object.freeze([]),
  });
}

function parseCompressedTensors(type: string, o: Record<string, unknown>): Int4Spec {
  const status = o['quantization_status'] ?? 'compressed';
  if (status !== 'compressed') throw unsupported(type, 'quantization_status', `${JSON.stringify(status)} is not supported; only "compressed" (packed weights)`);
  for (const field of ['kv_cache_scheme', 'transform_config'] as const) {
    if (o[field] != null) throw unsupported(type, field, `${JSON.stringify(o[field])} is not supported; only null`);
  }
  const sparsity = o['sparsity_config'];
  if (sparsity != null && (typeof sparsity !== 'object' || (sparsity as Record<string, unknown>)['format'] !== 'dense')) {
    throw unsupported(type, 'sparsity_config', 'sparse weights are not supported; only null or format "dense"');
  }
  const groups = o['config_groups'];
  if (typeof groups !== 'object' || groups === null || Array.isArray(groups) || Object.keys(groups).length === 0) {
    throw bad(type, 'config_groups', 'expected an object of one or more quantization groups', groups);
  }
  const topFormat = o['format'];
  let groupSize: number | undefined;
  const targets: string[] = [];
  for (const [name, g] of Object.entries(groups as Record<string, unknown>)) {
    const f = `config_groups.${name}`;
    if (typeof g !== 'object' || g === null) throw bad(type, f, 'expected an object', g);
    const grp = g as Record<string, unknown>;
    const format = grp['format'] ?? topFormat;
    if (format !== 'pack-quantized') throw unsupported(type, grp['format'] !== undefined ? `${f}.format` : 'format', `${JSON.stringify(format)} is not supported; only "pack-quantized" (int4 values eight an int32)`);
    for (const act of ['input_activations', 'output_activations'] as const) {
      if (grp[act] != null) throw unsupported(type, `${f}.${act}`, 'quantized activations are not supported; only weight-only schemes (null)');
    }
    const w = grp['weights'];
    if (typeof w !== 'object' || w === null) throw bad(type, `${f}.weights`, 'expected an object', w);
    const wt = w as Record<string, unknown>;
    fourBits(type, `${f}.weights.num_bits`, wt['num_bits']);
    if (wt['type'] !== 'int') throw unsupported(type, `${f}.weights.type`, `${JSON.stringify(wt['type'])} is not supported; only "int"`);
    if (wt['symmetric'] !== true) throw unsupported(type, `${f}.weights.symmetric`, `${JSON.stringify(wt['symmetric'])} is not supported; only true (no zero points)`);
    if (wt['dynamic'] !== undefined && wt['dynamic'] !== false) throw unsupported(type, `${f}.weights.dynamic`, 'only static weight scales (false) are supported');
    // Group act-order stores a weight_g_idx the groups follow instead of the column order.
    if (wt['actorder'] != null && wt['actorder'] !== false && wt['actorder'] !== 'static') {
      throw unsupported(type, `${f}.weights.actorder`, `${JSON.stringify(wt['actorder'])} is not supported; only null or "static" (groups of consecutive columns)`);
    }
    if (wt['block_structure'] != null) throw unsupported(type, `${f}.weights.block_structure`, 'block scales are not supported; only groups along a row');
    const strategy = wt['strategy'];
    const size = strategy === 'channel' ? 0 : strategy === 'group' ? groupSizeOf(type, `${f}.weights.group_size`, wt['group_size']) : undefined;
    if (size === undefined) throw unsupported(type, `${f}.weights.strategy`, `${JSON.stringify(strategy)} is not supported; only "group" and "channel"`);
    if (groupSize !== undefined && size !== groupSize) throw unsupported(type, `${f}.weights.group_size`, `${size} differs from another group's ${groupSize}; every 4-bit linear must share one group size`);
    groupSize = size;
    const t = grp['targets'];
    if (!Array.isArray(t) || t.length === 0 || !t.every((x) => typeof x === 'string' && x.length > 0)) throw bad(type, `${f}.targets`, 'expected an array of module names, classes or "re:" patterns', t);
    targets.push(...(t as string[]).map((x) => (x.startsWith('re:') ? `re:${pattern(type, `${f}.targets`, x.slice(3))}` : x)));
  }
  const ignore = strings(type, 'ignore', o['ignore']).map((x) => (x.startsWith('re:') ? `re:${pattern(type, 'ignore', x.slice(3))}` : x));
  return Object.freeze({
    method: 'compressed-tensors' as const, groupSize: groupSize!, zeroPoints: false, zeroOffset: 0,
    notConvert: Object.freeze([]), inBlock: null, targets: Object.freeze(targets), ignore: Object.freeze(ignore),
  });
}

/** The linear projections the engine may read in 4 bits (routers, embeddings and lm_head always as stored). */
const LINEAR_MODULE = /_proj(_with_mqa)?$/;
/** A decoder block's module: its block prefix and the name within the block. */
const IN_BLOCK = /^model\.layers\.\d+\.(.+)$/;

/**
 * compressed-tensors' match of a module name against a target or ignore entry (vLLM compressed_tensors utils,
 * _is_equal_or_regex_match / find_matched_target): "re:" a regex matched at the name's start (Python's re.match),
 * else the name itself, or "Linear", the class every module read here is.
 */
function ctMatch(module: string, target: string): boolean {
  if (target.startsWith('re:')) return new RegExp(`^(?:${target.slice(3)})`).test(module);
  return target === module || target === 'Linear';
}

/**
 * Whether linear module `module` (a weight's name without ".weight") is stored in 4 bits: GPTQ and AWQ every linear
 * of a decoder block (Qwen's GPTQ-Int4: all of them, the router being no *_proj), less modules_to_not_convert
 * (substrings, as vLLM's is_layer_skipped_awq and transformers' replace_with_awq_linear match them), GPTQ's dynamic
 * "-:" patterns, and outside modules_in_block_to_quantize where that is given; compressed-tensors every module its
 * config groups target that `ignore` does not name.
 */
export function int4Module(q: Int4Spec, module: string): boolean {
  if (!LINEAR_MODULE.test(module)) return false;
  if (q.method === 'compressed-tensors') return q.targets.some((t) => ctMatch(module, t)) && !q.ignore.some((t) => ctMatch(module, t));
  const block = IN_BLOCK.exec(module);
  if (!block) return false;
  if (q.inBlock && !q.inBlock.includes(block[1]!)) return false;
  if (q.notConvert.some((m) => module.includes(m))) return false;
  return !q.ignore.some((t) => ctMatch(module, t));
}

/** The group size of a row of `cols` values (0 in the spec: the whole row). */
export function int4Group(q: Int4Spec, cols: number): number {
  return q.groupSize === 0 ? cols : q.groupSize;
}
