#!/usr/bin/env python3
"""Joins two make-checkpoint folders of one preset into one deeper checkpoint: A's layers, then B's renumbered
after them (B's embeddings, final norm and lm_head are dropped). For depths make-checkpoint cannot reach in one
run on the device (it keeps float32 dequantized copies of quantized tensors on the GPU: gpt-oss-120b in MXFP4
runs out of memory past ~4 layers). A is moved (not copied) to OUT.
  python3 bench/gpu/join-checkpoints.py A B OUT
"""
import json, os, sys
from safetensors import safe_open
from safetensors.torch import save_file

a, b, out = sys.argv[1:4]
ca, cb = (json.load(open(os.path.join(d, 'config.json'))) for d in (a, b))
for k in ('model_type', 'hidden_size', 'quantization_config'):
    if ca.get(k) != cb.get(k): sys.exit(f'{k} differs between {a} and {b}')
La, Lb = ca['num_hidden_layers'], cb['num_hidden_layers']
os.rename(a, out)
idx_path = os.path.join(out, 'model.safetensors.index.json')
idx = json.load(open(idx_path))
ib = json.load(open(os.path.join(b, 'model.safetensors.index.json')))
added = 0
for shard in sorted(set(ib['weight_map'].values())):
    tensors = {}
    with safe_open(os.path.join(b, shard), 'pt') as f:
        for k in f.keys():
            if not k.startswith('model.layers.'): continue
            i = int(k.split('.')[2])
            tensors[k.replace(f'model.layers.{i}.', f'model.layers.{i + La}.', 1)] = f.get_tensor(k)
    if not tensors: continue
    name = 'joined-' + shard
    save_file(tensors, os.path.join(out, name), metadata={'format': 'pt'})
    for k, t in tensors.items():
        idx['weight_map'][k] = name
        added += t.numel() * t.element_size()
idx.setdefault('metadata', {})['total_size'] = idx.get('metadata', {}).get('total_size', 0) + added
ca['num_hidden_layers'] = La + Lb
if 'layer_types' in ca: ca['layer_types'] = ca['layer_types'] + cb['layer_types']
json.dump(ca, open(os.path.join(out, 'config.json'), 'w'), indent=2)
json.dump(idx, open(idx_path, 'w'), indent=2)
print(f'joined {a} ({La} layers) and {b} ({Lb} layers) into {out}: {La + Lb} layers, {added / 1e9:.2f} GB added')
