"""The benchmark's analysis scripts on the committed GPU results: their tables must agree with the
suite run they read, so that a change to either shows here and not in a misleading report."""
import json
import os
import re
import subprocess
import sys

import pytest


def test_suite_ceilings_agree_with_the_committed_run(source_dir):
    suite = source_dir / "bench/results/h200_suite.json"
    run = json.loads(suite.read_text())
    out = subprocess.run([sys.executable, str(source_dir / "bench/suite_ceilings.py"), str(suite)],
                         check=True, capture_output=True, text=True).stdout
    rows = [line for line in out.splitlines() if re.match(r"\| \w+ \| \d+ \|", line)]
    assert len(rows) == len(run["rows"])
    measured, at_ceiling_all, at_ceiling_bytes = map(
        float, re.findall(r"(\d+\.\d+)×\.", out.splitlines()[-1]))
    assert measured == round(run["geomean_speedup_vs_best_peer"], 2)
    # No call beats its floor plus the launch gap, so ceilings only raise the geo-mean.
    assert measured <= at_ceiling_bytes <= at_ceiling_all
    for line, row in zip(rows, run["rows"]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert (cells[0], int(cells[1])) == (row["workload"], row["bs"])
        assert float(cells[6]) == round(row["floor_us"] + 1.7, 1)


def test_search_power_corpus_is_valid_and_large_enough(yirage_bin, source_dir, tmp_path):
    """Every graph of bench/search_power.py's corpus loads and type-checks in yirage, and the
    corpus keeps what the issue asked of it: at least 20 graphs, f16 and bf16 among them."""
    subprocess.run([sys.executable, str(source_dir / "bench/search_power.py"), "--export",
                    str(tmp_path)], check=True, capture_output=True)
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) >= 20
    dtypes = set()
    for f in files:
        subprocess.run([yirage_bin, "graph", "show", str(f)], check=True, capture_output=True)
        dtypes |= {n["dtype"] for n in json.loads(f.read_text())["nodes"] if "dtype" in n}
    assert {"f32", "f16", "bf16"} <= dtypes


def test_search_power_rejects_unknown_graph_names(source_dir):
    p = subprocess.run([sys.executable, str(source_dir / "bench/search_power.py"), "--graphs",
                        "no_such_graph"], capture_output=True, text=True)
    assert p.returncode != 0 and "unknown no_such_graph" in p.stderr


def test_cost_model_report_agrees_with_the_committed_gpu_run(source_dir):
    """bench/cost_model.py reads every estimated candidate of the committed run, and its committed
    report is what the script prints for that run today."""
    suite = source_dir / "bench/results/h100_suite.json"
    out = subprocess.run([sys.executable, str(source_dir / "bench/cost_model.py"), str(suite)],
                         check=True, capture_output=True, text=True).stdout
    run = json.loads(suite.read_text())
    estimated = sum("estimated" in c["label"] and c["status"] == "ok" and bool(c.get("tuned_us"))
                    for row in run["rows"] for c in row["candidates"])
    assert f"MAPE over {estimated} candidates" in out
    committed = (source_dir / "bench/results/cost_model_h100.txt").read_text()
    assert out in committed


def test_todays_cost_model_on_the_committed_gpu_run_is_the_committed_rescore(source_dir):
    """The committed rescore (today's model against the H100's measured candidates) is what the
    model predicts now: a change to the model must show its effect on those measurements."""
    rescore = os.environ.get("YIRAGE_COST_RESCORE_BIN")
    if not rescore:
        pytest.skip("YIRAGE_COST_RESCORE_BIN is set by ctest")
    out = subprocess.run([sys.executable, str(source_dir / "bench/cost_model.py"), "--rescore",
                          rescore, str(source_dir / "bench/results/h100_tuning.sqlite")],
                         check=True, capture_output=True, text=True).stdout
    assert "MAPE over 43 candidates" in out
    committed = (source_dir / "bench/results/cost_model_h100.txt").read_text()
    assert "".join(f"# {line}\n" for line in out.splitlines()) in committed


def test_cost_model_runs_on_the_cpu_backend(source_dir, yirage_bin, tmp_path):
    """--run-cpu tunes a graph with --profile-all and with top-k, pairs every measured candidate
    with the model's prediction (the unfused graph's included) and writes its text, JSON and PNG."""
    out = tmp_path / "cost_model_cpu"
    p = subprocess.run([sys.executable, str(source_dir / "bench/cost_model.py"), "--run-cpu",
                        "--yirage", yirage_bin, "--graphs", "ntrans", "--budget", "2",
                        "--out", str(out)], check=True, capture_output=True, text=True)
    assert "MAPE over" in p.stdout and "tuning wall time: profile-all" in p.stdout
    rows = json.loads((tmp_path / "cost_model_cpu.json").read_text())
    assert [r["graph"] for r in rows] == ["ntrans"]
    labels = [label for label, _, _ in rows[0]["pairs"]]
    assert "unfused" in labels and all(" + " not in label for label in labels)
    assert all(pred > 0 and meas > 0 for _, pred, meas in rows[0]["pairs"])
    assert (tmp_path / "cost_model_cpu.png").read_bytes().startswith(b"\x89PNG")


def load_bench(source_dir, name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, source_dir / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_llm_bench_reads_the_block_table_generate_prints(source_dir, yirage_bin):
    bench = load_bench(source_dir, "llm_vs_llamacpp")
    model = bench.model_path(None)
    if not model.is_file():
        pytest.skip(f"the model is missing at {model} (run scripts/fetch-model.sh)")
    for hand in (False, True):
        r = bench.run_ours(yirage_bin, model, bench.DECODE_PROMPT, 3, 2, hand, time_blocks=True)
        blocks = r["blocks"]
        assert "rmsnorm+qkv, 1 rows" in blocks and "final norm + lm head" in blocks, blocks
        assert all(ms > 0 for ms in blocks.values()), blocks


def test_llm_bench_blocks_report_pairs_the_paths(source_dir):
    bench = load_bench(source_dir, "llm_vs_llamacpp")
    lines = []
    bench.blocks_report(lines.append, {
        "searched": [{"mlp, 1 rows": 0.2, "only ours": 1.0}, {"mlp, 1 rows": 0.4}],
        "hand-written": [{"mlp, 1 rows": 0.1}, {"mlp, 1 rows": 0.3}, {"mlp, 1 rows": 0.2}]})
    rows = {name: line.split() for line in lines[3:] for name in ("mlp, 1 rows", "only ours")
            if line.endswith("  " + name)}
    # Medians 0.3 against 0.2: 1.5x; a block one path lacks gets no ratio.
    assert rows["mlp, 1 rows"][:5] == ["0.3000", "[0.2000-0.4000]", "0.2000", "[0.1000-0.3000]",
                                       "1.50"]
    assert rows["only ours"][:4] == ["1.0000", "[1.0000-1.0000]", "-", "-"]
