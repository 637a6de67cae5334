#!/usr/bin/env python3
"""transformers float32 references for a DeepSeek-V3 checkpoint under DeepSeek's YaRN (on the device: it needs torch).

  python3 test/gpu/deepseek-yarn-refs.py --src /tmp/ds2 --out /tmp/ds2y [--factor 40] [--original 4096] [--steps 16]

--src: a make-checkpoint folder (refs.json: its prompts are reused) or a family fixture (parity.json). --out gets the
source's files linked, config.json with rope_parameters set to the YaRN the hub's DeepSeek-V3 / R1 configs carry
(factor 40, mscale = mscale_all_dim = 1, beta_fast 32, beta_slow 1, original_max_position_embeddings 4096), and
refs.json in make-checkpoint's format (greedy tokens and top-5 logits, float32, TF32 off), so
test/gpu/real-size.gpu.ts (REAL_CKPT=--out) checks the CUDA backend against transformers under it (and the CPU one with
REAL_CPU=1, which real-run.sh's ds2y leaves off: at V3's hidden size the CPU twin does not fit beside it).
"""
import argparse, json, os, sys, time
import torch, transformers as T

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument('--src', required=True); ap.add_argument('--out', required=True)
ap.add_argument('--factor', type=float, default=40.0); ap.add_argument('--original', type=int, default=4096)
ap.add_argument('--steps', type=int, default=16)
a = ap.parse_args()
t0 = time.time()
os.makedirs(a.out, exist_ok=True)
for f in os.listdir(a.src):
    if f in ('config.json', 'refs.json'): continue
    dst = os.path.join(a.out, f)
    if not os.path.lexists(dst): os.symlink(os.path.abspath(os.path.join(a.src, f)), dst)
c = json.load(open(os.path.join(a.src, 'config.json')))
if c.get('model_type') != 'deepseek_v3': sys.exit(f"--src: model_type {c.get('model_type')!r}, expected 'deepseek_v3'")
old = c.get('rope_parameters') or c.get('rope_scaling') or {}
theta = old.get('rope_theta', c.get('rope_theta', 10000.0))
c.pop('rope_scaling', None); c.pop('rope_theta', None)
c['rope_parameters'] = {'rope_type': 'yarn', 'rope_theta': theta, 'factor': a.factor, 'mscale': 1.0, 'mscale_all_dim': 1.0,
                        'beta_fast': 32, 'beta_slow': 1, 'original_max_position_embeddings': a.original}
c['max_position_embeddings'] = max(c.get('max_position_embeddings', 0), int(a.factor * a.original))
json.dump(c, open(os.path.join(a.out, 'config.json'), 'w'), indent=2)

src_refs = os.path.join(a.src, 'refs.json')
prompts = [x['prompt_ids'] for x in json.load(open(src_refs if os.path.exists(src_refs) else os.path.join(a.src, 'parity.json')))['cases']]
torch.backends.cuda.matmul.allow_tf32 = False; torch.backends.cudnn.allow_tf32 = False
dev = 'cuda' if torch.cuda.is_available() else 'cpu'
model = T.AutoModelForCausalLM.from_pretrained(a.out, dtype=torch.float32, attn_implementation='eager').to(dev).eval()
att = model.model.layers[0].self_attn
print(f'[{time.time()-t0:.0f} s] loaded; attention scaling {att.scaling:.6f} (qk^-0.5 {att.qk_head_dim ** -0.5:.6f})', flush=True)
cases = []
with torch.no_grad():
    for ids in prompts:
        out = model(input_ids=torch.tensor([ids], device=dev), use_cache=True); pkv = out.past_key_values
        logits = out.logits[0, -1]; case = {'domain': 'yarn', 'prompt_ids': ids, 'tokens': [], 'top5_ids': [], 'top5_logits': []}
        for _ in range(a.steps):
            top = torch.topk(logits.float(), 5); t = int(top.indices[0])
            case['tokens'].append(t); case['top5_ids'].append(top.indices.tolist()); case['top5_logits'].append([round(v, 5) for v in top.values.tolist()])
            out = model(input_ids=torch.tensor([[t]], device=dev), past_key_values=pkv, use_cache=True); pkv, logits = out.past_key_values, out.logits[0, -1]
        cases.append(case)
json.dump({'preset': 'deepseek-v3 under YaRN', 'rope_parameters': c['rope_parameters'], 'dtype': 'float32', 'transformers': T.__version__,
           'scaling': att.scaling, 'cases': cases}, open(os.path.join(a.out, 'refs.json'), 'w'))
print(f'[{time.time()-t0:.0f} s] {len(cases)} cases x {a.steps} steps in {a.out}/refs.json', flush=True)
