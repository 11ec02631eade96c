"""Dequantize a GGUF into the Hugging Face directory vLLM's CPU build can serve.

vLLM 0.32 cannot run GGUF weights on a CPU (its GGUF kernels are CUDA or
Triton), so the node turns the verified GGUF into a directory (``config.json``,
the tokenizer, bf16 ``model.safetensors``) once per artifact digest; see
docs/engines-vllm.md for the measured recipe and why each step is needed. This
script runs under the *vLLM* interpreter (its own virtualenv, where gridctl is
not installed), offline, in a subprocess the adapter starts: it imports nothing
from gridctl.

Two details decide whether the model answers sensibly:

- tied embeddings are saved under the embedding's own name
  (``model.embed_tokens.weight``): vLLM skips ``lm_head.weight`` when the
  embeddings are tied, and a directory holding only that name loads no
  embedding at all (every token then decodes to id 0);
- the tokenizer adds BOS exactly when the GGUF says so
  (``tokenizer.ggml.add_bos_token``): the converted Gemma tokenizer does not,
  and without ``<bos>`` the model degenerates.

Usage: ``python vllm_convert.py GGUF OUTDIR``; OUTDIR must not exist yet.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# this script's directory holds gridctl's ``vllm.py``: it must not shadow real packages
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


def gguf_add_bos(gguf: Path) -> bool | None:
    """``tokenizer.ggml.add_bos_token`` of the GGUF; None when it does not say."""
    from gguf import GGUFReader  # type: ignore[import-not-found,unused-ignore]

    field = GGUFReader(str(gguf)).fields.get("tokenizer.ggml.add_bos_token")
    if field is None or not field.data:
        return None
    return bool(field.parts[field.data[0]][0])


def ensure_bos(out: Path, add_bos: bool, bos_id: int | None, bos_token: str | None) -> None:
    """Make the saved ``tokenizer.json`` prepend BOS (a template post-processor)."""
    if not add_bos or bos_id is None or bos_token is None:
        return
    path = out / "tokenizer.json"
    doc = json.loads(path.read_text("utf-8"))
    doc["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [
            {"SpecialToken": {"id": bos_token, "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
        ],
        "pair": [
            {"SpecialToken": {"id": bos_token, "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": bos_token, "type_id": 1}},
            {"Sequence": {"id": "B", "type_id": 1}},
        ],
        "special_tokens": {bos_token: {"id": bos_token, "ids": [bos_id], "tokens": [bos_token]}},
    }
    path.write_text(json.dumps(doc, ensure_ascii=False), "utf-8")


def convert(gguf: Path, out: Path) -> None:
    import torch  # type: ignore[import-not-found,unused-ignore]
    from safetensors.torch import save_file  # type: ignore[import-not-found,unused-ignore]
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # type: ignore[import-not-found,unused-ignore]
    from transformers.models.auto.modeling_auto import (  # type: ignore[import-not-found,unused-ignore]
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    )

    out.mkdir(parents=True)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
    config.save_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.save_pretrained(out)
    add_bos = gguf_add_bos(gguf)
    first = tokenizer("Hi")["input_ids"][:1]
    if add_bos and first != [tokenizer.bos_token_id]:
        ensure_bos(out, True, tokenizer.bos_token_id, tokenizer.bos_token)
        again = AutoTokenizer.from_pretrained(out)("Hi")["input_ids"][:1]
        if again != [tokenizer.bos_token_id]:
            sys.exit(f"vllm_convert: the tokenizer still does not add BOS ({again})")
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16
    )
    state = model.state_dict()
    if getattr(config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # keep the embedding's own name
    tensors = {name: value.detach().contiguous().clone() for name, value in state.items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: vllm_convert.py GGUF OUTDIR")
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
