"""Tuning on a Ray cluster of several processes, as a user's would be: a head node and two worker
nodes of one CPU each, every one its own set of Ray processes (GCS, raylet, workers) on this
machine, started by ray.cluster_utils.Cluster and stopped by the fixture whatever the tests do.
The nodes take Ray's default node address, as the tests' `local_ray` does, not 127.0.0.1: a driver
given a loopback address connects to this machine's address instead (Ray's
resolve_ip_for_localhost), where a node bound to 127.0.0.1 does not listen. The drivers
connect to it by address from processes of their own, as `yirage optimize --ray ADDRESS` and a
user's `yr.superoptimize(..., cluster=ADDRESS)` do; nothing here shares the test process's Ray
(the other files' `local_ray`)."""
import json
import os
import sqlite3
import subprocess
import sys

import pytest

import yirage as yr

from ray_support import require, yirage_command

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# Two quick searches (a few seconds each on one thread) with several verified candidates each.
GRAPHS = ["examples/lora.json", "examples/rmsnorm_linear.json"]
# One search thread and a bound on the states, well inside the budget: the search is then the same
# on every machine and in every process (budget-bound searches stop where the clock says), so the
# cluster's tasks and the local superoptimize verify the same candidates; profile_all has both
# profile every one (the search ranks more than the tuner's default top-k measures).
CONFIG = {"seed": 1, "threads": 1, "max_states": 2000, "profile_all": True}
BUDGET = 30


@pytest.fixture(scope="module")
def cluster(ray_module):
    """The head (no CPUs: it schedules, it does not tune) and two worker nodes of one CPU each,
    so that two tuning tasks of one CPU each must run on different nodes."""
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, shutdown_at_exit=True,
                    head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(2):
            nodes.add_node(num_cpus=1)
        nodes.wait_for_nodes()
        yield nodes
    finally:
        nodes.shutdown()


def run_driver(code, *args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)


DRIVER = """
import json, sys
import ray
import yirage as yr
import yirage.ray
from yirage.ray_cli import connect

address, cache, config, budget, *paths = sys.argv[1:]
config, budget = json.loads(config), float(budget)
connect(address)
results = yirage.ray.tune_graphs(paths, backend="cpu", config=config, budget=budget, cache=cache)
nodes = {n["NodeID"]: n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"]}
# superoptimize(cluster=...) of the first graph, into a cache of its own: the local load reads
# what this call's task merged.
optimized = yr.load(paths[0]).superoptimize(
    backend="cpu", config=dict(config, cache=cache + ".2"), budget=budget, cluster=address)
print(json.dumps({
    "results": [{k: r[k] for k in ("mugraph", "node_id", "pid")} for r in results],
    "nodes": nodes,
    "optimized_type": type(optimized).__name__,
    "optimized_report": {k: v for k, v in optimized.report().items()
                         if isinstance(v, (bool, int, float, str))},
    "optimized_mugraph": optimized.mugraph.to_json(),
}))
"""


@pytest.fixture(scope="module")
def tuned_on_cluster(cluster, source_dir, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cluster") / "tuning.sqlite"
    paths = [str(source_dir / g) for g in GRAPHS]
    done = run_driver(DRIVER, cluster.address, cache, json.dumps(CONFIG), BUDGET, *paths)
    assert done.returncode == 0, done.stderr[-3000:]
    return paths, cache, json.loads(done.stdout.strip().splitlines()[-1])


def candidates(cache):
    """{entry's original graph (structural hash): its candidates as {(label, µGraph JSON): seconds
    measured, or None where not run or failed}, and the chosen one's (label, µGraph JSON)}."""
    out = {}
    with sqlite3.connect(cache) as db:
        for entry_id, original, chosen in db.execute(
                "SELECT id, original_json, chosen FROM entries"):
            rows = db.execute("SELECT idx, label, status, seconds, graph_json FROM candidates "
                              "WHERE entry_id = ? ORDER BY idx", (entry_id,)).fetchall()
            out[yr.from_json(original).structural_hash()] = {
                "seconds": {(label, g): (t if status == "ok" else None)
                            for _, label, status, t, g in rows},
                "chosen": next((label, g) for i, label, _, _, g in rows if i == chosen),
            }
    return out


def test_two_graphs_run_on_the_two_worker_nodes(tuned_on_cluster):
    _, _, out = tuned_on_cluster
    workers = {node for node, cpus in out["nodes"].items() if cpus >= 1}
    assert len(out["nodes"]) == 3 and len(workers) == 2
    ran_on = [r["node_id"] for r in out["results"]]
    assert set(ran_on) == workers, ran_on
    assert len({r["pid"] for r in out["results"]}) == 2 and os.getpid() not in ran_on


def test_superoptimize_with_cluster_returns_the_local_kind_of_result(tuned_on_cluster):
    paths, cache, out = tuned_on_cluster
    assert out["optimized_type"] == "OptimizedGraph"
    assert out["optimized_report"]["cache_hit"] is True
    assert out["optimized_report"]["backend"] == "cpu"
    # What runs is the winner its task measured and merged.
    (entry,) = candidates(str(cache) + ".2").values()
    assert out["optimized_mugraph"] == yr.from_json(entry["chosen"][1]).to_json()


@pytest.fixture(scope="module")
def tuned_locally(tuned_on_cluster, tmp_path_factory):
    paths, cluster_cache, _ = tuned_on_cluster
    local_cache = tmp_path_factory.mktemp("local") / "tuning.sqlite"
    for path in paths:
        yr.load(path).superoptimize(backend="cpu", budget=BUDGET,
                                    config=dict(CONFIG, cache=str(local_cache)))
    remote, local = candidates(cluster_cache), candidates(local_cache)
    assert remote.keys() == local.keys() and len(local) == len(paths)
    return remote, local


def test_the_cluster_verifies_the_uGraphs_a_local_superoptimize_verifies(tuned_locally):
    remote, local = tuned_locally
    for key in local:
        # The same search proved the same candidates (CONFIG makes it deterministic), and each
        # run measured every one of them.
        assert remote[key]["seconds"].keys() == local[key]["seconds"].keys()
        assert None not in remote[key]["seconds"].values()


# The winners themselves are not compared: they are measured, and on a test machine's shared
# cores the measurements swing by more than any margin a test could demand (one Ray task measured
# lora's unfused graph at 0.4 ms and chose it where this process measured 32 ms and chose the fused
# µGraph; one of eight local runs without Ray measured 0.44 ms too: docs/ray.md). A test that
# tolerated that could never fail, so the same proved candidate set, above, is what is held equal.


def test_optimize_ray_reports_the_clusters_winner_as_a_cache_hit(cluster, source_dir, tmp_path,
                                                               tuned_on_cluster):
    command = yirage_command()
    require(command is not None, "no yirage command (YIRAGE_BIN, pip's or the build's)",
            "YIRAGE_REQUIRE_RAY")
    cache = tmp_path / "tuning.sqlite"
    path = str(source_dir / GRAPHS[0])
    done = subprocess.run(
        [command, "optimize", path, "--backend", "cpu", "--ray", cluster.address, "--budget",
         str(BUDGET), "--seed", "1", "--threads", "1", "--max-states", "2000", "--cache",
         str(cache), "--json"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ray: tuned on node" in done.stderr
    report = json.loads(done.stdout)
    assert report["cache_hit"] is True, report
    with sqlite3.connect(cache) as db:
        assert db.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == 1
    # The same search as the driver's task: the same candidates.
    _, cluster_cache, _ = tuned_on_cluster
    key = yr.load(path).structural_hash()
    assert (candidates(cache)[key]["seconds"].keys()
            == candidates(cluster_cache)[key]["seconds"].keys())
