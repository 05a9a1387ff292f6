"""yirage.LLM on the test model (SmolLM2-135M-Instruct Q4_1, fetched by scripts/fetch-model.sh)."""
import os
import pathlib

import pytest

import yirage as yr


@pytest.fixture(scope="module")
def model_path() -> str:
    path = os.environ.get("YIRAGE_MODEL_PATH") or str(
        pathlib.Path.home() / ".cache/yirage/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(path):
        if os.environ.get("YIRAGE_REQUIRE_MODEL") == "1":
            pytest.fail(f"the test model is required and missing: {path}")
        pytest.skip("the test model is not fetched (scripts/fetch-model.sh)")
    return path


@pytest.fixture(scope="module")
def llm(model_path):
    return yr.LLM(model_path, threads=2)


def test_greedy_generation_is_deterministic_and_streams(llm):
    pieces = []
    text = llm.generate("The capital of France is", max_tokens=8, on_text=pieces.append)
    assert "Paris" in text
    assert "".join(pieces) == text
    stats = llm.last_stats()
    assert stats["prompt_tokens"] == len(llm.tokenize("The capital of France is")) > 0
    assert 0 < stats["generated_tokens"] <= 8
    assert llm.generate("The capital of France is", max_tokens=8) == text


def test_tokenizer_round_trip(llm):
    ids = llm.tokenize("Hello, world")
    assert ids and all(isinstance(i, int) for i in ids)
    assert llm.detokenize(ids) == "Hello, world"


def test_callback_exceptions_stop_generation(llm):
    seen = []

    def stop(piece):
        seen.append(piece)
        raise RuntimeError("enough")

    with pytest.raises(RuntimeError, match="enough"):
        llm.generate("Once upon a time", max_tokens=16, on_text=stop)
    assert len(seen) == 1
    assert llm.generate("Once upon a time", max_tokens=2)  # still usable afterwards


def test_errors_name_the_problem(model_path):
    with pytest.raises(yr.Error, match="nowhere.gguf"):
        yr.LLM("/nowhere.gguf")
    with pytest.raises(yr.Error, match="max_tokens"):
        yr.LLM(model_path).generate("x", max_tokens=-1)


def test_the_backend_is_chosen_by_name_and_an_unavailable_one_is_an_error(model_path):
    with pytest.raises(yr.Error, match="unknown backend 'nope'"):
        yr.LLM(model_path, backend="nope")
    for info in yr.describe_backends():
        if not info["available"]:
            with pytest.raises(yr.Error, match=f"backend '{info['name']}' is unavailable: "):
                yr.LLM(model_path, backend=info["name"])
    assert yr.LLM(model_path, backend="cpu").hot_path == "fused kernel graphs on the cpu backend"


def test_attention_runs_as_a_graph_on_the_backend_when_asked(model_path):
    with pytest.raises(yr.Error, match='attention "gpu" is not one of auto, host, backend'):
        yr.LLM(model_path, attention="gpu")
    graph = yr.LLM(model_path, threads=2, context_length=64, attention="backend")
    assert graph.hot_path == "fused kernel graphs on the cpu backend, attention on the backend"
    assert "Paris" in graph.generate("The capital of France is", max_tokens=8)


def test_fused_blocks_report_progress_and_can_be_turned_off(model_path):
    lines = []
    fused = yr.LLM(model_path, threads=2, progress=lines.append)
    assert fused.hot_path == "fused kernel graphs on the cpu backend"
    # One line per block graph: optimized the first time in this session's cache, then cached.
    assert len(lines) == 9 and lines[0].startswith("[1/9] rmsnorm+qkv, 64 rows:")
    assert "Paris" in fused.generate("The capital of France is", max_tokens=8)
    hand = yr.LLM(model_path, threads=2, fused_blocks=False)
    assert hand.hot_path == "hand-written kernels (fused blocks turned off)"
    assert hand.generate("The capital of France is", max_tokens=8) == fused.generate(
        "The capital of France is", max_tokens=8)


def test_a_progress_callback_that_raises_stops_the_load(model_path):
    def boom(line):
        raise RuntimeError("stop: " + line)

    with pytest.raises(RuntimeError, match=r"stop: \[1/9\]"):
        yr.LLM(model_path, threads=2, progress=boom)


def test_block_graphs_are_the_graphs_a_fused_load_optimizes_in_its_order(model_path):
    lines = []
    yr.LLM(model_path, threads=2, progress=lines.append)
    graphs = yr.LLM(model_path, fused_blocks=False).block_graphs()
    assert [name for name, _ in graphs] == [line.split("] ", 1)[1].split(":")[0] for line in lines]
    assert all(isinstance(g, yr.KernelGraph) and g.to_json() for _, g in graphs)
