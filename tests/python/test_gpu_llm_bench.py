"""bench/gpu_llm_bench.py, bench/make_llama_safetensors.py and bench/make_llama_gguf.py as far as
a machine without a GPU goes: the arguments, the random-weight model files (at a tiny shape here;
the 8B shape's tensor lists checked against Llama-3-8B's parameter count), that YiRage loads the
files and runs the Q4_0 one on its fused (quantized) path, and the one-line failure where no GPU
is."""
import json
import math
import re
import struct
import subprocess
import sys

import numpy as np
import pytest


def bench(source_dir, *args):
    return subprocess.run(
        [sys.executable, str(source_dir / "bench/gpu_llm_bench.py"), *map(str, args)],
        capture_output=True, text=True)


def has_gpu(yirage_bin):
    try:
        import torch
    except ImportError:
        return False
    backends = json.loads(subprocess.run([yirage_bin, "backends", "--json"], check=True,
                                         capture_output=True, text=True).stdout)
    return torch.cuda.is_available() and any(
        b["name"] == "cuda" and b["available"] for b in backends)


def test_the_8b_shape_is_llama_3_8b(source_dir):
    sys.path.insert(0, str(source_dir / "bench"))
    import make_llama_safetensors as m
    shapes = m.tensor_shapes(m.SHAPES["llama3-8b"])
    params = sum(math.prod(shape) for _, shape in shapes)
    assert params == 8_030_261_248  # Llama-3-8B's published count
    assert len(shapes) == 32 * 9 + 3


def test_every_id_of_the_random_models_vocabulary_decodes_to_text(source_dir):
    # A streaming client times text chunks; ids without text would leave nothing to time.
    sys.path.insert(0, str(source_dir / "bench"))
    import make_llama_safetensors as m
    vocab = m.tokenizer_json(256, 512)["model"]["vocab"]
    assert sorted(vocab.values()) == [i for i in range(512) if i != 256]
    assert all(text for text in vocab)


def test_the_smollm2_shape_is_smollm2_135m(source_dir):
    sys.path.insert(0, str(source_dir / "bench"))
    import make_llama_safetensors as m
    shapes = dict(m.tensor_shapes(m.SHAPES["smollm2-135m"]))
    params = sum(math.prod(shape) for shape in shapes.values())
    # SmolLM2-135M's published count, its LM head tied to the embedding (written untied here).
    assert params - math.prod(shapes["lm_head.weight"]) == 134_515_008


def test_the_q4_0_gguf_has_llama_3_8b_shapes_in_q4_0_blocks(source_dir):
    sys.path.insert(0, str(source_dir / "bench"))
    import make_llama_gguf as m
    tensors = m.tensors(m.SHAPES["llama3-8b"])
    assert sum(math.prod(dims) for _, dims, _ in tensors) == 8_030_261_248
    assert all(kind == m.TYPE_Q4_0 for _, dims, kind in tensors if len(dims) == 2)
    assert m.nbytes((4096, 14336), m.TYPE_Q4_0) == 4096 * 14336 // 32 * 18


def test_the_model_files_load_in_yirage(yirage_bin, source_dir, tmp_path):
    prep = bench(source_dir, "--yirage", yirage_bin, "--work", tmp_path, "--llama-shape", "tiny",
                 "--smollm2", tmp_path / "absent.gguf", "--prepare-only")
    assert prep.returncode == 0, prep.stderr
    assert "model tiny bf16" in prep.stdout
    model = tmp_path / "tiny-bf16"
    raw = (model / "model.safetensors").read_bytes()
    header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    assert header["lm_head.weight"] == {"dtype": "BF16", "shape": [512, 128],
                                        "data_offsets": header["lm_head.weight"]["data_offsets"]}
    gen = subprocess.run([yirage_bin, "generate", "--model", str(model), "--prompt", "hello", "-n",
                          "3", "--backend", "cpu"], capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr
    assert re.search(r"prefill: 5 tokens", gen.stderr), gen.stderr
    assert "model tiny Q4_0" in prep.stdout
    gen = subprocess.run([yirage_bin, "generate", "--model", str(tmp_path / "tiny-q4_0.gguf"),
                          "--prompt", "hello", "-n", "3", "--backend", "cpu"],
                         capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr
    assert "hot blocks: fused kernel graphs on the cpu backend" in gen.stderr, gen.stderr


def test_without_a_gpu_it_fails_with_one_line_after_the_cpu_steps(yirage_bin, source_dir,
                                                                  tmp_path):
    if has_gpu(yirage_bin):
        pytest.skip("this machine has a GPU: the benchmark would run")
    run = bench(source_dir, "--yirage", yirage_bin, "--work", tmp_path, "--llama-shape", "tiny",
                "--smollm2", tmp_path / "absent.gguf")
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "gpu_llm_bench: needs a CUDA GPU: " in run.stderr
    assert (tmp_path / "tiny-bf16" / "model.safetensors").exists()


def test_bad_arguments_are_refused(yirage_bin, source_dir, tmp_path):
    for args in (["--batch-sizes", "0,4"], ["--batch-sizes", "128"], ["--batch-sizes", "a"],
                 ["--tokens", "1"]):
        run = bench(source_dir, "--yirage", yirage_bin, "--work", tmp_path, *args)
        assert run.returncode == 2 and "error:" in run.stderr, args


def test_large_models_copy_their_weights_from_a_pool_of_normal_draws(source_dir, tmp_path,
                                                                      monkeypatch):
    sys.path.insert(0, str(source_dir / "bench"))
    import make_llama_safetensors as m
    monkeypatch.setattr(m, "POOL_VALUES", 1 << 16)  # the tiny shape's 0.3 M weights exceed it
    m.make_model("tiny", tmp_path / "pooled")
    raw = (tmp_path / "pooled" / "model.safetensors").read_bytes()
    header_len = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + header_len])
    start, end = header["model.layers.0.mlp.up_proj.weight"]["data_offsets"]
    bits = np.frombuffer(raw[8 + header_len + start:8 + header_len + end], dtype="<u2")
    values = (bits.astype(np.uint32) << 16).view(np.float32)
    assert abs(values.std() - 0.02) < 0.002 and abs(values.mean()) < 0.002
    start, end = header["model.norm.weight"]["data_offsets"]
    norm = np.frombuffer(raw[8 + header_len + start:8 + header_len + end], dtype="<u2")
    assert (norm == 0x3F80).all()  # bf16 1.0
