"""The model the GPU loader benchmarks load (benches/gpu/loader_vs_peers.py): random bf16
tensors with Llama-like shapes, generated on the GPU and kept there as the reference, written
as safetensors shards with an index; and the check every loaded tensor must pass.

Earlier (issue 16) this file was itself a benchmark of hipobj.load_safetensors next to boto3;
benches/gpu/loader_vs_peers.py replaced it (issue 31).
"""

from __future__ import annotations

import json
import os

import torch

ACCESS, SECRET, REGION = "benchkey", "benchsecret", "us-east-1"


def llama_like(layers: int, hidden: int, inter: int, vocab: int) -> list:
    shapes = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes += [(p + "self_attn.q_proj.weight", (hidden, hidden)), (p + "self_attn.k_proj.weight", (hidden, hidden)),
                   (p + "self_attn.v_proj.weight", (hidden, hidden)), (p + "self_attn.o_proj.weight", (hidden, hidden)),
                   (p + "mlp.gate_proj.weight", (inter, hidden)), (p + "mlp.up_proj.weight", (inter, hidden)),
                   (p + "mlp.down_proj.weight", (hidden, inter)), (p + "input_layernorm.weight", (hidden,)),
                   (p + "post_attention_layernorm.weight", (hidden,))]
    shapes += [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]
    return shapes


def generate(outdir: str, gib: float, shard_gib: float):
    """Random bf16 tensors on the GPU (kept as the reference), written as shards + index."""
    from safetensors.torch import save_file

    hidden, inter, vocab = 4096, 11008, 32000
    per_layer = (4 * hidden * hidden + 3 * inter * hidden) * 2
    layers = max(1, int((gib * 2**30 - 2 * vocab * hidden * 2) // per_layer) + 1)
    g = torch.Generator(device="cuda").manual_seed(16)
    source, shards, current, size = {}, [], {}, 0
    for name, shape in llama_like(layers, hidden, inter, vocab):
        t = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(torch.bfloat16)
        source[name] = t
        current[name] = t
        size += t.numel() * 2
        if size >= shard_gib * 2**30:
            shards.append(current)
            current, size = {}, 0
    if current:
        shards.append(current)
    n = len(shards)
    weight_map, files = {}, []
    for i, tensors in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(outdir, fname))
        files.append(fname)
        weight_map.update({k: fname for k in tensors})
    with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return source, files


def check(source: dict, loaded: dict, label: str) -> None:
    assert sorted(loaded) == sorted(source), f"{label}: tensor names differ"
    for k, v in source.items():
        got = loaded[k]
        assert got.device == v.device and got.dtype == v.dtype and got.shape == v.shape, f"{label}: {k}"
        assert torch.equal(got, v), f"{label}: tensor {k} differs"
