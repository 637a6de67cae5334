#!/usr/bin/env python3
# The peer's model for bench:cpu --peer (issue 18): a bf16 GGUF of a checkpoint, made by llama.cpp's own
# converter (convert_hf_to_gguf.py, from a llama.cpp tree beside the repo, not in it). Runs where torch and
# transformers are installed (the lent GPU machine). The tiny-moe tokenizer's pre-tokenizer hash is unknown to
# the converter; it is the Qwen2 pre-tokenizer, so the converter is told so.
#   python3 bench/cpu/make-gguf.py --llama LLAMA_CPP_DIR --model models/tiny-moe --out tiny-moe-bf16.gguf
import argparse
import runpy
import sys
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument('--llama', required=True, help='a llama.cpp tree (convert_hf_to_gguf.py, conversion/, gguf-py/)')
ap.add_argument('--model', required=True)
ap.add_argument('--out', required=True)
a = ap.parse_args()
root = Path(a.llama).resolve()
sys.path.insert(0, str(root))
sys.path.insert(1, str(root / 'gguf-py'))
import conversion.base as base  # noqa: E402

known = base.TextModel.get_vocab_base_pre


def pre_or_qwen2(self, tokenizer):
    try:
        return known(self, tokenizer)
    except NotImplementedError:
        return 'qwen2'


base.TextModel.get_vocab_base_pre = pre_or_qwen2
sys.argv = ['convert_hf_to_gguf.py', a.model, '--outtype', 'bf16', '--outfile', a.out]
runpy.run_path(str(root / 'convert_hf_to_gguf.py'), run_name='__main__')
