"""Building kernel graphs: shapes and dtypes, JSON round trips, rendering, and the errors of
invalid programs."""
import json
import shutil

import pytest

import yirage as yr


def rmsnorm_linear():
    g = yr.new_kernel_graph()
    x = g.new_input(dims=(8, 64), dtype=yr.float16, name="x")
    w = g.new_input(dims=(64, 32), dtype=yr.float16, name="w")
    y = g.matmul(g.rms_norm(x, normalized_shape=(64,)), w)
    g.mark_output(y, "y")
    return g, x, w, y


def test_builders_infer_shapes_and_dtypes():
    g, x, w, y = rmsnorm_linear()
    assert x.shape == [8, 64] and x.dtype == yr.float16 and x.name == "x"
    assert y.shape == [8, 32] and y.dtype == yr.float16 and y.num_dims == 2
    assert y.dim(-1) == 32 and y.dim(0) == 8
    r = g.reduction(x, 1)
    assert r.shape == [8, 1]
    assert g.reduction(x, -1, keepdim=False).shape == [8]
    assert g.reduction(x, 0, kind="max").shape == [1, 64]
    assert g.softmax(x, dim=-1).shape == [8, 64]
    assert g.concat([x, x], dim=0).shape == [16, 64]
    assert [t.shape for t in g.split(x, 1, [16, 48])] == [[8, 16], [8, 48]]
    assert g.transpose(w).shape == [32, 64]
    assert g.reshape(x, (4, -1)).shape == [4, 128]
    assert g.layer_norm(x, normalized_shape=(64,)).shape == [8, 64]
    assert (x + x).shape == [8, 64] and (x * g.reduction(x, 1)).shape == [8, 64]
    assert [t.name for t in g.inputs] == ["x", "w"]
    assert [t.shape for t in g.outputs] == [[8, 32]]
    for op in ("exp", "silu", "gelu", "relu", "sqrt", "square", "rsqrt", "neg", "reciprocal"):
        assert getattr(g, op)(x).shape == [8, 64], op
    for op in ("add", "sub", "mul", "div", "pow"):
        assert getattr(g, op)(x, x).shape == [8, 64], op


def test_dtype_spellings():
    g = yr.new_kernel_graph()
    assert g.new_input(dims=(2,), dtype="float32").dtype == yr.float32
    assert g.new_input(dims=(2,), dtype="bf16").dtype == yr.bfloat16
    np = pytest.importorskip("numpy")
    assert g.new_input(dims=(2,), dtype=np.float16).dtype == yr.float16
    with pytest.raises(yr.Error, match="'float64' is not a YiRage dtype"):
        g.new_input(dims=(2,), dtype="float64")
    assert g.new_input(dims=(2,)).dtype == yr.float16  # Mirage's default


def test_json_round_trip():
    g, *_ = rmsnorm_linear()
    text = g.to_json()
    doc = json.loads(text)
    assert doc["schema"] == "yirage.kernel_graph"
    for copy in (yr.from_json(text), yr.from_json(doc)):
        assert copy.to_json() == text
        assert copy.structural_hash() == g.structural_hash()
        assert [t.shape for t in copy.outputs] == [[8, 32]]


def test_save_and_load(tmp_path):
    g, *_ = rmsnorm_linear()
    path = tmp_path / "g.json"
    g.save(str(path))
    assert yr.load(str(path)).structural_hash() == g.structural_hash()


def test_structural_hash_ignores_names():
    a, *_ = rmsnorm_linear()
    b = yr.new_kernel_graph()
    x = b.new_input(dims=(8, 64), dtype=yr.float16)
    w = b.new_input(dims=(64, 32), dtype=yr.float16)
    b.mark_output(b.matmul(b.rms_norm(x, normalized_shape=(64,)), w))
    assert a.structural_hash() == b.structural_hash()
    b.mark_output(x)
    assert a.structural_hash() != b.structural_hash()


def test_visualize_dot(tmp_path):
    g, *_ = rmsnorm_linear()
    path = tmp_path / "g.dot"
    assert g.visualize(str(path)) == str(path)
    text = path.read_text()
    assert text.startswith("digraph") and "rms_norm" in text and "matmul" in text


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz is not installed")
def test_visualize_svg(tmp_path):
    g, *_ = rmsnorm_linear()
    path = tmp_path / "g.svg"
    g.visualize(str(path))
    assert "<svg" in path.read_text()


def test_wrong_shapes_raise_with_the_rule():
    g = yr.new_kernel_graph()
    a = g.new_input(dims=(4, 8), dtype=yr.float32)
    b = g.new_input(dims=(4, 8), dtype=yr.float32)
    with pytest.raises(yr.Error, match=r"matmul\(f32\[4, 8\], f32\[4, 8\]\)"):
        g.matmul(a, b)
    with pytest.raises(yr.Error, match="add"):
        g.add(a, g.new_input(dims=(3,), dtype=yr.float32))
    with pytest.raises(yr.Error, match="dtype"):
        g.add(a, g.new_input(dims=(4, 8), dtype=yr.float16))
    with pytest.raises(yr.Error, match="rms_norm"):
        g.rms_norm(a, normalized_shape=(4,))
    with pytest.raises(yr.Error, match="softmax"):
        g.softmax(a, dim=2)
    with pytest.raises(yr.Error, match="reduction: kind 'prod'"):
        g.reduction(a, 0, kind="prod")
    with pytest.raises(yr.Error, match=r"dim\(5\): out of range"):
        a.dim(5)
    assert isinstance(yr.Error("x"), ValueError)


def test_tensors_of_another_graph_are_refused():
    g1, x1, _, _ = rmsnorm_linear()
    g2 = yr.new_kernel_graph()
    with pytest.raises(yr.Error, match="belongs to another graph"):
        g2.exp(x1)


def test_invalid_json_names_the_problem():
    with pytest.raises(yr.Error, match="version"):
        yr.from_json({"schema": "yirage.kernel_graph", "version": 99, "nodes": [], "outputs": []})
    with pytest.raises(yr.Error):
        yr.from_json("{not json")
    doc = json.loads(rmsnorm_linear()[0].to_json())
    doc["nodes"][2]["inputs"] = ["nowhere"]
    with pytest.raises(yr.Error, match=r"\$\.nodes\[2\]"):
        yr.from_json(doc)


def test_docstrings_help():
    assert "kernel graph" in yr.new_kernel_graph.__doc__
    assert "normalized_shape" in yr.KernelGraph.rms_norm.__doc__
    assert "backend" in yr.KernelGraph.superoptimize.__doc__
