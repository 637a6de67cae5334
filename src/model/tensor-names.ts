// Hub tensor names of the checkpoint's shared pieces and of a Qwen3-MoE-style layer: the one place these
// strings are spelled. A leaf module (imports nothing), so families/common.ts can use it whichever module
// is imported first.

/** Hub tensor names of one layer. */
/** A layer's router and routed experts' tensor names (a family's own, or qwen3_moe's below). */
export interface MoeNames {
  readonly router: string;
  expert(e: number): { readonly gate: string; readonly up: string; readonly down: string };
}

export function layerTensorNames(l: number) {
  const p = `model.layers.${l}`;
  return {
    inputNorm: `${p}.input_layernorm.weight`,
    postAttnNorm: `${p}.post_attention_layernorm.weight`,
    qProj: `${p}.self_attn.q_proj.weight`,
    kProj: `${p}.self_attn.k_proj.weight`,
    vProj: `${p}.self_attn.v_proj.weight`,
    oProj: `${p}.self_attn.o_proj.weight`,
    qNorm: `${p}.self_attn.q_norm.weight`,
    kNorm: `${p}.self_attn.k_norm.weight`,
    router: `${p}.mlp.gate.weight`,
    expert: (e: number) => ({
      gate: `${p}.mlp.experts.${e}.gate_proj.weight`,
      up: `${p}.mlp.experts.${e}.up_proj.weight`,
      down: `${p}.mlp.experts.${e}.down_proj.weight`,
    }),
  };
}

export const EMBED = 'model.embed_tokens.weight';
export const FINAL_NORM = 'model.norm.weight';
export const LM_HEAD = 'lm_head.weight';
