#!/usr/bin/env python3
"""Writes a random-weight Llama model as a Hugging Face directory: config.json
(LlamaForCausalLM), model.safetensors (bf16 or f16), a byte-level BPE tokenizer.json (the 256
bytes, an end-of-text token and a filler word for every other id) and tokenizer_config.json.
Both YiRage (`--model DIR`) and HF transformers load it, so bench/gpu_llm_bench.py times both on
the same weights.

    python3 bench/make_llama_safetensors.py --shape llama3-8b --out /tmp/llama3-8b-random
    python3 bench/make_llama_safetensors.py --shape tiny --out /tmp/tiny   # CI's shape

The weights are normal(0, 0.02) (norms 1), written one chunk at a time, so the 8B shape (16 GB
in bf16) needs little memory. Models of up to POOL_VALUES weights draw every value afresh; larger
ones copy each chunk from a random offset of one pool of POOL_VALUES encoded draws, because
drawing and rounding 8 billion normals takes minutes where copying takes seconds (the device
lease that runs this is short). The values are random: the text is noise, the timings are not.
"""
import argparse
import json
import pathlib
import struct
import sys

import numpy as np

# Llama-3-8B's shape, and smaller ones for CI and quick runs.
SHAPES = {
    "llama3-8b": dict(hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=128256,
                      rope_theta=500000.0),
    "llama3-1b": dict(hidden=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocab=128256,
                      rope_theta=500000.0),
    "tiny": dict(hidden=128, layers=2, heads=4, kv_heads=2, ffn=256, vocab=512,
                 rope_theta=500000.0),
    # SmolLM2-135M's shape (its config.json), for a peer whose time depends on shapes alone; its
    # LM head is written untied, so a step reads the same bytes as the tied original.
    "smollm2-135m": dict(hidden=576, layers=30, heads=9, kv_heads=3, ffn=1536, vocab=49152,
                         rope_theta=100000.0),
}
DTYPES = {"bf16": "BF16", "f16": "F16"}
POOL_VALUES = 1 << 26


def tensor_shapes(s):
    """(name, shape) of every weight, in file order."""
    head_dim = s["hidden"] // s["heads"]
    q, kv = s["heads"] * head_dim, s["kv_heads"] * head_dim
    out = [("model.embed_tokens.weight", (s["vocab"], s["hidden"]))]
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (s["hidden"],)),
                (p + "self_attn.q_proj.weight", (q, s["hidden"])),
                (p + "self_attn.k_proj.weight", (kv, s["hidden"])),
                (p + "self_attn.v_proj.weight", (kv, s["hidden"])),
                (p + "self_attn.o_proj.weight", (s["hidden"], q)),
                (p + "post_attention_layernorm.weight", (s["hidden"],)),
                (p + "mlp.gate_proj.weight", (s["ffn"], s["hidden"])),
                (p + "mlp.up_proj.weight", (s["ffn"], s["hidden"])),
                (p + "mlp.down_proj.weight", (s["hidden"], s["ffn"]))]
    out += [("model.norm.weight", (s["hidden"],)), ("lm_head.weight", (s["vocab"], s["hidden"]))]
    return out


def encode(values: np.ndarray, dtype: str) -> bytes:
    """float32 values as bf16 (round to nearest even) or f16, little-endian."""
    if dtype == "f16":
        return values.astype("<f2").tobytes()
    bits = values.astype("<f4").view("<u4").astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def write_safetensors(path: pathlib.Path, shapes, dtype: str, seed: int):
    rng = np.random.default_rng(seed)
    header, offset = {}, 0
    for name, shape in shapes:
        size = int(np.prod(shape)) * 2
        header[name] = {"dtype": DTYPES[dtype], "shape": list(shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    rows_per_chunk = 1024
    pool = None
    if offset // 2 > POOL_VALUES:
        pool = np.frombuffer(encode(rng.standard_normal(POOL_VALUES, dtype=np.float32) * 0.02,
                                    dtype), dtype="<u2")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape in shapes:
            if len(shape) == 1:  # a norm's gain
                f.write(encode(np.ones(shape, np.float32), dtype))
                continue
            for r in range(0, shape[0], rows_per_chunk):
                count = min(rows_per_chunk, shape[0] - r) * shape[1]
                if pool is None:
                    f.write(encode(rng.standard_normal(count, dtype=np.float32) * 0.02, dtype))
                else:
                    start = int(rng.integers(0, POOL_VALUES - count + 1))
                    f.write(pool[start:start + count].tobytes())
    return offset


def bytes_to_unicode():
    """Byte-level BPE's printable stand-in for each of the 256 bytes."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def tokenizer_json(eos_id: int, vocab_size: int):
    """Every id of the embedding decodes to text: the 256 bytes, the end-of-text token, and past
    it a filler word `<id>` per id (its characters are printable ASCII, so byte-level keeps them).
    A random model samples ids all over its vocabulary; without the fillers most of them would
    decode to nothing, and a streaming client would see no text to time."""
    vocab = {c: b for b, c in bytes_to_unicode().items()}
    vocab.update({f"<{i}>": i for i in range(eos_id + 1, vocab_size)})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": eos_id, "content": "<|end_of_text|>", "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False,
                              "special": True}],
            "normalizer": None, "pre_tokenizer": byte_level, "post_processor": byte_level,
            "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []}}


def make_model(shape: str, out: pathlib.Path, dtype: str = "bf16", seed: int = 0) -> int:
    """Writes the directory; returns the bytes of weights."""
    s = SHAPES[shape]
    out.mkdir(parents=True, exist_ok=True)
    eos_id = 256
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
              "hidden_size": s["hidden"], "intermediate_size": s["ffn"],
              "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"],
              "num_key_value_heads": s["kv_heads"], "head_dim": s["hidden"] // s["heads"],
              "rms_norm_eps": 1e-5, "rope_theta": s["rope_theta"], "rope_scaling": None,
              "vocab_size": s["vocab"], "max_position_embeddings": 8192,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16" if dtype == "bf16"
              else "float16", "bos_token_id": eos_id, "eos_token_id": eos_id}
    (out / "config.json").write_text(json.dumps(config, indent=1))
    (out / "tokenizer.json").write_text(json.dumps(tokenizer_json(eos_id, s["vocab"])))
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"add_bos_token": False, "add_eos_token": False, "eos_token": "<|end_of_text|>"}))
    return write_safetensors(out / "model.safetensors", tensor_shapes(s), dtype, seed)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    args = ap.parse_args(argv)
    size = make_model(args.shape, args.out, args.dtype, args.seed)
    print(f"{args.out}: {args.shape} {args.dtype}, {size / 2**30:.2f} GiB of weights")


if __name__ == "__main__":
    sys.exit(main())
