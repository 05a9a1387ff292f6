"""torch.compile(model, backend="yirage"): found by name through the package's entry point,
matching eager on fresh random inputs for the suite's modules, a Llama decoder layer and a module
with ops YiRage does not cover; zero-copy by data pointer; the tuning cache across processes;
dynamic shapes; training refused."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import require_torch

torch = require_torch()

import yirage as yr  # noqa: E402
import yirage.torch as yt  # noqa: E402
from torch_modules import (  # noqa: E402
    LlamaDecoderLayer, WithUncoveredOps, llama_inputs, suite_inputs, suite_modules)

HERE = os.path.dirname(os.path.abspath(__file__))
# Small searches: the tests check what runs, not how fast.
OPTIONS = {"budget": 2.0}
TOLERANCES = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float16: dict(rtol=1e-2, atol=1e-2),
              torch.bfloat16: dict(rtol=4e-2, atol=4e-2)}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def new_reports(first):
    return yt.compile_reports[first:]


def compile_and_check(module, make_inputs, dtype=torch.float32, runs=2, **options):
    """Compiles module, runs it on `runs` sets of fresh random inputs from make_inputs(generator),
    and checks each against eager; returns the compile reports it made."""
    module = module.to(dtype)
    first = len(yt.compile_reports)
    compiled = torch.compile(module, backend="yirage", options={**OPTIONS, **options})
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for _ in range(runs):
            fresh = [x.to(dtype) for x in make_inputs(generator)]
            torch.testing.assert_close(compiled(*fresh), module(*fresh), **TOLERANCES[dtype])
    return new_reports(first)


SUITE = suite_modules(scale=64)


@pytest.mark.parametrize("name", sorted(SUITE))
def test_suite_module_matches_eager_and_runs_entirely_on_yirage(name):
    module, shapes = SUITE[name]
    (report,) = compile_and_check(module, lambda g: suite_inputs(name, shapes, g))
    assert report.left_in_pytorch == []
    assert report.subgraphs and all(s.taken and s.verified for s in report.subgraphs)


@pytest.mark.parametrize("seq,past", [(1, 7), (4, 3)], ids=["decode", "prefill"])
def test_llama_decoder_layer_matches_eager(seq, past):
    torch.manual_seed(3)
    layer = LlamaDecoderLayer(hidden=64, heads=4, kv_heads=2, intermediate=128)
    reports = compile_and_check(layer, lambda g: llama_inputs(layer, seq=seq, past=past, generator=g))
    (report,) = reports
    taken = [s for s in report.subgraphs if s.taken]
    assert taken and all(s.verified for s in taken)
    ops_taken = [op for s in taken for op in s.ops]
    for op in ("aten.mm", "aten.bmm", "aten.rsqrt", "aten.silu", "aten._softmax", "aten.cat"):
        assert op in ops_taken
    # The mask's repeat is not in the IR: it stays in PyTorch, and says so.
    assert [op["op"] for op in report.left_in_pytorch] == ["aten.repeat"]
    assert report.left_in_pytorch[0]["reason"] == "not in YiRage's IR"


def test_half_precision_matches_eager_within_its_tolerance():
    module, shapes = suite_modules(scale=64)["gated_mlp"]
    compile_and_check(module, lambda g: suite_inputs("gated_mlp", shapes, g), dtype=torch.float16)


def test_uncovered_ops_and_graph_breaks_stay_in_pytorch_and_are_reported(capsys):
    torch.manual_seed(5)
    module = WithUncoveredOps(hidden=32)
    x = torch.randn(4, 32)
    explanation = yt.explain(module, x, **OPTIONS)
    printed = capsys.readouterr().out
    assert len(explanation.reports) >= 2  # the data-dependent branch breaks the graph
    left = {op["op"]: op["reason"] for op in explanation.left_in_pytorch}
    assert "not in YiRage's IR" in (left.get("aten.sort"), left.get("aten.argsort"))
    assert "aten.gather" in left
    assert "left in PyTorch: aten.gather" in printed
    assert explanation.max_abs_difference < 1e-4
    taken = [s for s in explanation.subgraphs if s.taken]
    assert taken and all(s.verified and s.seconds > 0 and s.eager_seconds > 0 for s in taken)
    with torch.no_grad():
        fresh = torch.randn(4, 32)
        compiled = torch.compile(module, backend="yirage", options=OPTIONS)
        torch.testing.assert_close(compiled(fresh), module(fresh), rtol=1e-4, atol=1e-4)


def test_tensors_cross_without_copies_by_data_pointer():
    module, shapes = suite_modules(scale=64)["gated_mlp"]
    first = len(yt.compile_reports)
    compiled = torch.compile(module, backend="yirage", options=OPTIONS)
    x = torch.randn(shapes[0])
    with torch.no_grad():
        out = compiled(x)
    (report,) = new_reports(first)
    (subgraph,) = report.subgraphs
    last = subgraph.runner.last
    # The module read the torch tensors (x and the weights) where they lie, and the compiled
    # model returned the very memory the module wrote.
    assert last["input_copies"] == 0
    assert last["module_input_addresses"] == last["input_pointers"]
    assert x.data_ptr() in last["input_pointers"]
    assert module.w1.data_ptr() in last["input_pointers"]
    assert last["output_pointers"] == last["module_output_addresses"]
    assert out.data_ptr() == last["output_pointers"][0]


def test_a_non_contiguous_input_is_made_contiguous_and_counted():
    class TransposedInput(torch.nn.Module):
        def forward(self, a, b):
            return torch.exp(a) * b

    first = len(yt.compile_reports)
    module = TransposedInput()
    compiled = torch.compile(module, backend="yirage", options=OPTIONS)
    a = torch.randn(16, 8).t()  # a view with strides (1, 8)
    b = torch.randn(8, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(a, b), module(a, b))
    (report,) = new_reports(first)
    runner = report.subgraphs[0].runner
    assert runner.last["input_copies"] == 1
    assert runner.input_copies == 1


def test_dynamic_shapes_compile_per_size_within_the_limit(caplog):
    module, shapes = suite_modules(scale=64)["gated_mlp"]
    compiled = torch.compile(module, backend="yirage", dynamic=True,
                             options={**OPTIONS, "max_shapes": 2})
    first = len(yt.compile_reports)
    with torch.no_grad():
        for rows in (2, 3, 5, 2):
            x = torch.randn(rows, shapes[0][1])
            torch.testing.assert_close(compiled(x), module(x), rtol=1e-4, atol=1e-4)
    reports = new_reports(first)
    # 2, 3, 5 each compiled; 2 again after it was dropped for 5 (max_shapes 2).
    hidden = shapes[0][1]
    assert [next(s[0] for s in r.shapes if s[0] != hidden) for r in reports] == [2, 3, 5, 2]


def test_training_is_refused_with_a_clear_error():
    module, shapes = suite_modules(scale=64)["gated_mlp"]
    compiled = torch.compile(module, backend="yirage", options=OPTIONS)
    with pytest.raises(Exception, match="training is not supported"):
        compiled(torch.randn(shapes[0]))


def test_unknown_options_are_refused():
    module, shapes = suite_modules(scale=64)["gated_mlp"]
    compiled = torch.compile(module, backend="yirage", options={"budjet": 1})
    with torch.no_grad(), pytest.raises(Exception, match=r"unknown option\(s\) \['budjet'\]"):
        compiled(torch.randn(shapes[0]))


FRESH_PROCESS = textwrap.dedent("""
    import json, sys, torch
    sys.path.insert(0, sys.argv[1])
    from torch_modules import suite_modules
    torch.manual_seed(0)
    module, shapes = suite_modules(scale=64)["llama_mlp_block"]
    compiled = torch.compile(module, backend="yirage", options={"budget": 2.0})
    x = torch.randn(shapes[0])
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), module(x), rtol=1e-4, atol=1e-4)
    assert "yirage" not in sys.modules or "yirage.torch" in sys.modules
    import yirage.torch as yt
    print(json.dumps([[s.cache_hit, s.search_seconds] for r in yt.compile_reports
                      for s in r.subgraphs]))
""")


def test_found_by_name_and_a_second_compile_in_a_fresh_process_is_a_cache_hit(tmp_path):
    env = {**os.environ, "YIRAGE_CACHE_DIR": str(tmp_path)}
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", FRESH_PROCESS, HERE], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        runs.append((json.loads(done.stdout.strip().splitlines()[-1]), done.stderr))
    (first, first_log), (second, second_log) = runs
    assert first and not any(hit for hit, _ in first)
    assert second and all(hit and seconds == 0 for hit, seconds in second)
    assert "0 from the cache" in first_log
    assert f"{len(second)} from the cache, 0 searched" in second_log
