"""A µGraph, a kernel graph whose nodes include a fused kernel, through the `yirage` binary.

tests/data/ugraph_rmsnorm_linear.json computes rms_norm(X, G, eps 0) · W as a kernel-level reshape
of G and one fused kernel; its block graph splits W's columns over 3 blocks and walks K in 4
iterations. The reference backend runs the body block by block, and the result must match NumPy's
float64 computation of the unfused program.
"""
import subprocess

import numpy as np


def run_yirage(yirage_bin, *args):
    result = subprocess.run([yirage_bin, *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_fused_rmsnorm_linear_matches_numpy(yirage_bin, source_dir, tmp_path):
    graph = source_dir / "tests" / "data" / "ugraph_rmsnorm_linear.json"
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, size=(4, 32)).astype(np.float32)
    g = rng.uniform(-1, 1, size=(32,)).astype(np.float32)
    w = rng.uniform(-1, 1, size=(32, 24)).astype(np.float32)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for name, value in {"X": x, "G": g, "W": w}.items():
        np.save(inputs / f"{name}.npy", value)

    out = run_yirage(yirage_bin, "run", str(graph), "--backend", "reference",
                     "--inputs", str(inputs), "--save", str(tmp_path / "out"))
    assert "out: f32[4, 24]" in out

    got = np.load(tmp_path / "out" / "out.npy")
    x64 = x.astype(np.float64)
    rms = np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True))
    expected = (x64 / rms * g.astype(np.float64)) @ w.astype(np.float64)
    assert got.shape == (4, 24)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_graph_show_renders_the_fused_body(yirage_bin, source_dir, tmp_path):
    graph = source_dir / "tests" / "data" / "ugraph_rmsnorm_linear.json"
    dot = tmp_path / "g.dot"
    listing = run_yirage(yirage_bin, "graph", "show", str(graph), "--dot", str(dot))
    assert "fused" in listing
    text = dot.read_text()
    assert "subgraph cluster_n4_block" in text
    assert "subgraph cluster_n4_loop" in text
