"""superoptimize on small shapes: the optimized program matches NumPy, reports what it did, and
refuses wrong inputs and unknown or unavailable backends with a message naming the problem."""
import numpy as np
import pytest

import yirage as yr

# Small graphs keep the search short; the budget only bounds a slow machine.
BUDGET = 20.0


def rms_norm(x, eps=1e-6):
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def silu(x):
    return x / (1.0 + np.exp(-x))


def test_rmsnorm_linear_matches_numpy(rng):
    g = yr.new_kernel_graph()
    x = g.new_input(dims=(4, 32), dtype=yr.float32)
    w = g.new_input(dims=(32, 16), dtype=yr.float32)
    g.mark_output(g.matmul(g.rms_norm(x, normalized_shape=(32,)), w))
    opt = g.superoptimize(budget=BUDGET)
    xv = rng.standard_normal((4, 32), dtype=np.float32)
    wv = rng.standard_normal((32, 16), dtype=np.float32)
    (y,) = opt(inputs=[xv, wv])
    assert y.dtype == np.float32 and y.shape == (4, 16)
    np.testing.assert_allclose(y, rms_norm(xv) @ wv, rtol=1e-4, atol=1e-4)


def test_gated_mlp_f16_matches_numpy(rng):
    g = yr.new_kernel_graph()
    x = g.new_input(dims=(4, 16), dtype=yr.float16)
    w1 = g.new_input(dims=(16, 16), dtype=yr.float16)
    w2 = g.new_input(dims=(16, 16), dtype=yr.float16)
    g.mark_output(g.mul(g.silu(g.matmul(x, w1)), g.matmul(x, w2)))
    opt = g.superoptimize(budget=BUDGET)
    xv, w1v, w2v = (rng.uniform(-1, 1, s).astype(np.float16) for s in [(4, 16), (16, 16), (16, 16)])
    (y,) = opt(inputs=[xv, w1v, w2v])
    assert y.dtype == np.float16
    f = lambda a: a.astype(np.float64)  # noqa: E731
    expected = silu(f(xv) @ f(w1v)) * (f(xv) @ f(w2v))
    np.testing.assert_allclose(y.astype(np.float64), expected, rtol=2e-2, atol=2e-2)


def test_attention_core_matches_numpy(rng):
    g = yr.new_kernel_graph()
    q = g.new_input(dims=(2, 8, 16), dtype=yr.float32)
    k = g.new_input(dims=(2, 16, 32), dtype=yr.float32)
    v = g.new_input(dims=(2, 32, 16), dtype=yr.float32)
    a = g.exp(g.matmul(q, k))
    g.mark_output(g.matmul(g.div(a, g.reduction(a, 2)), v))
    opt = g.superoptimize(budget=BUDGET)
    qv, kv, vv = (rng.uniform(-0.5, 0.5, s).astype(np.float32)
                  for s in [(2, 8, 16), (2, 16, 32), (2, 32, 16)])
    (y,) = opt(inputs=[qv, kv, vv])
    e = np.exp(qv.astype(np.float64) @ kv)
    np.testing.assert_allclose(y, (e / e.sum(-1, keepdims=True)) @ vv, rtol=1e-4, atol=1e-5)


def test_bfloat16_through_ml_dtypes(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    g = yr.new_kernel_graph()
    x = g.new_input(dims=(4, 8), dtype=yr.bfloat16)
    g.mark_output(g.softmax(x, dim=-1))
    opt = g.superoptimize(budget=BUDGET)
    xv = rng.standard_normal((4, 8)).astype(ml_dtypes.bfloat16)
    (y,) = opt(inputs=[xv])
    assert y.dtype == ml_dtypes.bfloat16
    e = np.exp(xv.astype(np.float64))
    np.testing.assert_allclose(y.astype(np.float64), e / e.sum(-1, keepdims=True), rtol=2e-2,
                               atol=1e-2)
    with pytest.raises(yr.Error, match=r"input 'input0': expected dtype bf16"):
        opt(inputs=[xv.astype(np.float32)])


def test_report():
    g = yr.new_kernel_graph()
    x = g.new_input(dims=(4, 8), dtype=yr.float32)
    g.mark_output(g.mul(g.exp(x), x))
    opt = g.superoptimize(budget=BUDGET)
    report = opt.report()
    for key in ("kernels", "verified", "search_seconds", "states", "cache_hit", "backend"):
        assert key in report, key
    # "auto" tuned on every available backend worth tuning and runs on the fastest one.
    assert report["backend"] == opt.backend
    assert report["backend"] in yr.get_available_backends()
    measured = {name: s for name, s in report["backend_seconds"].items() if s >= 0}
    transfers = report["backend_transfer_seconds"]
    assert report["backend"] in measured
    assert set(transfers) == set(report["backend_seconds"])
    # A backend whose buffers are host memory pays no copies; the choice counts them.
    for name in ("cpu", "reference"):
        if name in measured:
            assert transfers[name] == 0
    calls = {name: s + transfers[name] for name, s in measured.items()}
    assert calls[report["backend"]] == min(calls.values())
    assert report["measured_seconds"] == measured[report["backend"]]
    assert report["verified"] is True
    assert report["cache_hit"] is False
    assert isinstance(report["kernels"], int) and 1 <= report["kernels"] <= 2
    assert report["kernels"] <= report["unfused_kernels"] == 2
    assert report["search_seconds"] > 0 and report["states"] >= 0
    assert len(opt.mugraph.outputs) == 1
    opt.report()["kernels"] = -1  # a copy: the optimized graph's report is unchanged
    assert opt.report()["kernels"] == report["kernels"]


def test_explicit_backend_and_config(rng):
    g = yr.new_kernel_graph()
    x = g.new_input(dims=(3, 5), dtype=yr.float32)
    g.mark_output(g.relu(x))
    opt = g.superoptimize(backend="reference", config={"threads": 1, "seed": 7}, budget=BUDGET)
    assert opt.report()["backend"] == "reference"
    xv = rng.standard_normal((3, 5), dtype=np.float32)
    np.testing.assert_array_equal(opt(inputs=[xv])[0], np.maximum(xv, 0))


def test_backend_errors():
    g = yr.new_kernel_graph()
    g.mark_output(g.exp(g.new_input(dims=(2,), dtype=yr.float32)))
    with pytest.raises(yr.Error, match="nope"):
        g.superoptimize(backend="nope")
    for info in yr.describe_backends():
        if not info["available"]:
            with pytest.raises(yr.Error, match=info["name"]):
                g.superoptimize(backend=info["name"])
    with pytest.raises(yr.Error, match="unknown config key 'bogus'"):
        g.superoptimize(config={"bogus": 1})
    with pytest.raises(yr.Error, match="budget must be a positive"):
        g.superoptimize(budget=-1)


def test_graph_without_outputs_is_refused():
    g = yr.new_kernel_graph()
    g.new_input(dims=(2,), dtype=yr.float32)
    with pytest.raises(yr.Error, match="no outputs"):
        g.superoptimize()


def test_wrong_inputs_name_the_input(rng):
    g = yr.new_kernel_graph()
    x = g.new_input(dims=(2, 3), dtype=yr.float32, name="x")
    y = g.new_input(dims=(2, 3), dtype=yr.float32, name="y")
    g.mark_output(g.mul(g.exp(x), y))
    opt = g.superoptimize(budget=BUDGET)
    xv = np.ones((2, 3), np.float32)
    yv = np.ones((2, 3), np.float32)
    with pytest.raises(yr.Error, match=r"input 'x': expected shape \[2, 3\], got \[3, 2\]"):
        opt(inputs=[np.ones((3, 2), np.float32), yv])
    with pytest.raises(yr.Error, match=r"input 'y': expected dtype f32 \(float32\), got float64"):
        opt(inputs=[xv, np.ones((2, 3))])
    with pytest.raises(yr.Error, match="1 inputs given, the graph takes 2"):
        opt(inputs=[xv])
    with pytest.raises(yr.Error, match="input 'y': expected a NumPy array or a DLPack tensor"):
        opt(inputs=[xv, "not an array"])
    with pytest.raises(yr.Error, match="inputs must be a list"):
        opt(inputs="xy")
    (out,) = opt(inputs=[xv, yv])
    np.testing.assert_allclose(out, np.exp(xv) * yv, rtol=1e-6)


def test_optimized_graph_is_independent_of_later_edits(rng):
    g = yr.new_kernel_graph()
    x = g.new_input(dims=(4,), dtype=yr.float32)
    g.mark_output(g.square(x))
    opt = g.superoptimize(budget=BUDGET)
    g.mark_output(g.exp(x))  # after the fact: not part of opt
    xv = rng.standard_normal(4, dtype=np.float32)
    outs = opt(inputs=[xv])
    assert len(outs) == 1
    np.testing.assert_allclose(outs[0], xv * xv, rtol=1e-6)


def test_second_superoptimize_is_a_cache_hit(rng, tmp_path):
    cache = str(tmp_path / "tuning.sqlite")
    g = yr.new_kernel_graph()
    x = g.new_input(dims=(4, 8), dtype=yr.float32)
    w = g.new_input(dims=(8, 8), dtype=yr.float32)
    g.mark_output(g.silu(g.matmul(x, w)))
    first = g.superoptimize(budget=BUDGET, config={"cache": cache})
    r1 = first.report()
    assert r1["cache_hit"] is False and r1["search_seconds"] > 0
    assert any(c["label"] == "unfused" for c in r1["candidates_measured"])
    assert r1["chosen"] in [c["label"] for c in r1["candidates_measured"]]

    second = g.superoptimize(budget=BUDGET, config={"cache": cache})
    r2 = second.report()
    assert r2["cache_hit"] is True
    assert r2["search_seconds"] == 0 and r2["states"] == 0  # no search ran
    assert r2["chosen"] == r1["chosen"] and r2["cache_entry"] == r1["cache_entry"]
    assert r2["verified"] is True  # re-proved, not taken on trust
    xv = rng.standard_normal((4, 8), dtype=np.float32)
    wv = rng.standard_normal((8, 8), dtype=np.float32)
    np.testing.assert_allclose(second(inputs=[xv, wv])[0], first(inputs=[xv, wv])[0], rtol=1e-6)

    again = g.superoptimize(budget=BUDGET, config={"cache": cache, "read_cache": False})
    assert again.report()["cache_hit"] is False


# A rank-1 operand of a fused group once gave the search a node name that clashed.
def test_broadcast_row_operand(rng):
    g = yr.new_kernel_graph()
    x = g.new_input(dims=(2, 3), dtype=yr.float32, name="x")
    y = g.new_input(dims=(3,), dtype=yr.float32, name="y")
    g.mark_output(g.mul(g.exp(x), y))
    opt = g.superoptimize(budget=BUDGET)
    xv = rng.standard_normal((2, 3), dtype=np.float32)
    yv = rng.standard_normal(3, dtype=np.float32)
    np.testing.assert_allclose(opt(inputs=[xv, yv])[0], np.exp(xv) * yv, rtol=1e-6)
