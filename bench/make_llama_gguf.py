#!/usr/bin/env python3
"""Writes a random-weight Llama model as a Q4_0 GGUF file (llama.cpp's layout: every matrix in
Q4_0 blocks, the norms in f32, a byte-level BPE vocabulary of the 256 bytes and an end-of-text
token, padded with reserved tokens to the shape's vocabulary). YiRage's engine reads it like any
GGUF, so the quantized path can be timed at shapes no small download has (Llama-3-8B's).

    python3 bench/make_llama_gguf.py --shape llama3-8b --out /tmp/llama3-8b-q4_0.gguf
    python3 bench/make_llama_gguf.py --shape tiny --out /tmp/tiny-q4_0.gguf   # CI's shape

Each Q4_0 block is a random 4-bit code with one f16 scale, so the weights are uniform in about
±0.02; the text is noise, the timings are not. Written one tensor at a time in little memory.
"""
import argparse
import pathlib
import struct
import sys

import numpy as np

from make_llama_safetensors import SHAPES, bytes_to_unicode

GGUF_MAGIC, GGUF_VERSION, ALIGNMENT = 0x46554747, 3, 32
U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
TYPE_F32, TYPE_Q4_0 = 0, 2
Q4_0_BLOCK, Q4_0_BYTES = 32, 18  # 32 weights: an f16 scale and 16 bytes of 4-bit codes


def gguf_string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key: str, kind: int, value) -> bytes:
    out = gguf_string(key) + struct.pack("<I", kind)
    if kind == STRING:
        return out + gguf_string(value)
    if kind == ARRAY:
        item_kind, items = value
        out += struct.pack("<IQ", item_kind, len(items))
        if item_kind == STRING:
            return out + b"".join(gguf_string(s) for s in items)
        return out + np.asarray(items, {I32: "<i4", F32: "<f4"}[item_kind]).tobytes()
    return out + struct.pack({U32: "<I", I32: "<i", F32: "<f", BOOL: "<?"}[kind], value)


def metadata(s, name):
    tokens = [bytes_to_unicode()[b] for b in range(256)] + ["<|end_of_text|>"]
    types = [1] * 256 + [3]
    tokens += [f"<|reserved_{i}|>" for i in range(s["vocab"] - len(tokens))]
    types += [3] * (s["vocab"] - len(types))
    eos = 256
    return [kv("general.architecture", STRING, "llama"), kv("general.name", STRING, name),
            kv("general.alignment", U32, ALIGNMENT),
            kv("llama.block_count", U32, s["layers"]),
            kv("llama.context_length", U32, 8192),
            kv("llama.embedding_length", U32, s["hidden"]),
            kv("llama.feed_forward_length", U32, s["ffn"]),
            kv("llama.attention.head_count", U32, s["heads"]),
            kv("llama.attention.head_count_kv", U32, s["kv_heads"]),
            kv("llama.rope.freq_base", F32, s["rope_theta"]),
            kv("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
            kv("tokenizer.ggml.model", STRING, "gpt2"),
            kv("tokenizer.ggml.pre", STRING, "gpt2"),
            kv("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
            kv("tokenizer.ggml.token_type", ARRAY, (I32, types)),
            kv("tokenizer.ggml.merges", ARRAY, (STRING, [])),
            kv("tokenizer.ggml.bos_token_id", U32, eos),
            kv("tokenizer.ggml.eos_token_id", U32, eos),
            kv("tokenizer.ggml.add_bos_token", BOOL, False)]


def tensors(s):
    """(name, ggml dims (row length first), type) of every tensor, in file order."""
    head_dim = s["hidden"] // s["heads"]
    q, kvd, h, f = s["heads"] * head_dim, s["kv_heads"] * head_dim, s["hidden"], s["ffn"]
    out = [("token_embd.weight", (h, s["vocab"]), TYPE_Q4_0)]
    for i in range(s["layers"]):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (h,), TYPE_F32), (b + "attn_q.weight", (h, q), TYPE_Q4_0),
                (b + "attn_k.weight", (h, kvd), TYPE_Q4_0),
                (b + "attn_v.weight", (h, kvd), TYPE_Q4_0),
                (b + "attn_output.weight", (q, h), TYPE_Q4_0),
                (b + "ffn_norm.weight", (h,), TYPE_F32), (b + "ffn_gate.weight", (h, f), TYPE_Q4_0),
                (b + "ffn_up.weight", (h, f), TYPE_Q4_0), (b + "ffn_down.weight", (f, h), TYPE_Q4_0)]
    return out + [("output_norm.weight", (h,), TYPE_F32),
                  ("output.weight", (h, s["vocab"]), TYPE_Q4_0)]


def nbytes(dims, kind):
    count = int(np.prod(dims))
    return count * 4 if kind == TYPE_F32 else count // Q4_0_BLOCK * Q4_0_BYTES


def make_model(shape: str, out: pathlib.Path, seed: int = 0) -> int:
    """Writes the file; returns the bytes of tensor data."""
    s = SHAPES[shape]
    rng = np.random.default_rng(seed)
    infos, offset = [], 0
    for name, dims, kind in tensors(s):
        infos.append(gguf_string(name) + struct.pack("<I", len(dims)) +
                     struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", kind, offset))
        offset += -(-nbytes(dims, kind) // ALIGNMENT) * ALIGNMENT
    meta = metadata(s, f"random {shape} Q4_0")
    out.parent.mkdir(parents=True, exist_ok=True)
    scale = np.float16(0.02 / 8).tobytes()
    blocks_per_chunk = 1 << 22
    with open(out, "wb") as f:
        f.write(struct.pack("<IIQQ", GGUF_MAGIC, GGUF_VERSION, len(infos), len(meta)))
        f.write(b"".join(meta) + b"".join(infos))
        f.write(b"\0" * (-f.tell() % ALIGNMENT))
        for _, dims, kind in tensors(s):
            size = nbytes(dims, kind)
            if kind == TYPE_F32:  # a norm's gain
                f.write(np.ones(dims, "<f4").tobytes())
            else:
                for first in range(0, size // Q4_0_BYTES, blocks_per_chunk):
                    n = min(blocks_per_chunk, size // Q4_0_BYTES - first)
                    block = rng.integers(0, 256, (n, Q4_0_BYTES), dtype=np.uint8)
                    block[:, :2] = np.frombuffer(scale, np.uint8)
                    f.write(block.tobytes())
            f.write(b"\0" * (-size % ALIGNMENT))
    return offset


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    args = ap.parse_args(argv)
    size = make_model(args.shape, args.out, args.seed)
    print(f"{args.out}: {args.shape} Q4_0, {size / 2**30:.2f} GiB of tensors")


if __name__ == "__main__":
    sys.exit(main())
