"""yirage.ray.tune_graphs on a local Ray: each graph is superoptimized in a Ray task of its own,
the winners' cache entries land in the caller's tuning cache, and a local superoptimize then finds
them there and runs the same µGraph."""
import os
import signal
import sqlite3
import threading
import time

import pytest

import yirage as yr

# Ray Serve's pydantic models warn when imported: Ray's warnings, not this suite's.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

GRAPHS = ["examples/ntrans.json", "examples/lora.json"]


@pytest.fixture(scope="module")
def tuned(local_ray, source_dir, tmp_path_factory):
    import yirage.ray

    cache = tmp_path_factory.mktemp("tune") / "tuning.sqlite"
    paths = [str(source_dir / g) for g in GRAPHS]
    results = yirage.ray.tune_graphs(paths, backend="cpu", budget=5, cache=str(cache),
                                     config={"seed": 1})
    return paths, cache, results


def test_each_graph_ran_in_a_ray_task_and_its_entry_is_in_the_callers_cache(tuned):
    paths, cache, results = tuned
    assert [r["name"] for r in results] == paths

    assert all(r["pid"] != os.getpid() for r in results)
    with sqlite3.connect(cache) as db:
        entries = db.execute("SELECT id, backend, fingerprint, chosen FROM entries").fetchall()
        candidates = db.execute("SELECT COUNT(*) FROM candidates").fetchone()[0]
    assert len(entries) == len(paths)
    assert {e[1] for e in entries} == {"cpu"}
    fingerprint = next(b["fingerprint"] for b in yr.describe_backends() if b["name"] == "cpu")
    assert {e[2] for e in entries} == {fingerprint}
    assert candidates >= len(paths) and all(e[3] >= 0 for e in entries)


def test_a_local_superoptimize_finds_the_shipped_winner(tuned):
    paths, cache, results = tuned
    for path, result in zip(paths, results):
        graph = yr.load(path)
        local = graph.superoptimize(backend="cpu", config={"cache": str(cache)})
        assert local.report()["cache_hit"] is True
        assert yr.from_json(result["mugraph"]).to_json() == local.mugraph.to_json()


def running_tune_task(deadline):
    """The pid of a Ray worker executing _tune_one: Ray titles such a process `ray::_tune_one`."""
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if f.read().startswith(b"ray::_tune_one"):
                        return int(entry)
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError("no Ray worker ran _tune_one")


def test_a_killed_tuning_worker_is_retried_by_ray(local_ray, source_dir, tmp_path):
    import yirage.ray

    cache = tmp_path / "tuning.sqlite"
    path = str(source_dir / "examples/lora.json")
    outcome = {}

    def tune():
        try:
            outcome["results"] = yirage.ray.tune_graphs([path], budget=5, cache=str(cache))
        except BaseException as e:  # handed to the test's thread
            outcome["error"] = e

    thread = threading.Thread(target=tune)
    thread.start()
    victim = running_tune_task(time.monotonic() + 120)
    os.kill(victim, signal.SIGKILL)
    thread.join(timeout=600)
    assert not thread.is_alive() and "error" not in outcome, outcome.get("error")
    (result,) = outcome["results"]
    assert result["pid"] != victim
    local = yr.load(path).superoptimize(backend="cpu", config={"cache": str(cache)})
    assert local.report()["cache_hit"] is True
    assert yr.from_json(result["mugraph"]).to_json() == local.mugraph.to_json()


def test_a_config_cache_is_refused(local_ray):
    import yirage.ray

    with pytest.raises(yr.Error, match="config 'cache' is the worker's"):
        yirage.ray.tune_graphs(["x.json"], config={"cache": "/tmp/c.sqlite"})


@pytest.mark.skipif(os.environ.get("YIRAGE_RAY_SLOW") != "1",
                    reason="tunes the model's 9 block graphs (about a minute on two cores); "
                           "YIRAGE_RAY_SLOW=1 runs it")
def test_the_models_block_graphs_tuned_on_ray_are_cache_hits_of_its_next_load(
        local_ray, model_path, tmp_path, monkeypatch):
    import yirage.ray

    # A cache of its own, which the load below reads through YIRAGE_CACHE_DIR.
    monkeypatch.setenv("YIRAGE_CACHE_DIR", str(tmp_path))
    graphs = yr.LLM(model_path, threads=1, fused_blocks=False).block_graphs()
    # The options the engine's own load tunes with (llm/fused_blocks.cpp).
    results = yirage.ray.tune_graphs(graphs, budget=2,
                                     config={"max_candidates": 3, "profile_seconds": 0.1})
    assert [r["name"] for r in results] == [name for name, _ in graphs]
    assert not any(r["report"]["cache_hit"] for r in results)
    lines = []
    yr.LLM(model_path, threads=2, progress=lines.append)
    assert len(lines) == 7 and all(line.endswith(", cached") for line in lines), lines
