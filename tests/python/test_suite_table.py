"""The main job's table script (scripts/suite_table.py) and the numpy programs it shares with
bench/cpu_bench.py (bench/numpy_suite.py)."""
import json
import os
import re
import subprocess
import sys


def test_numpy_suite_has_every_workload_at_the_suites_shapes(source_dir):
    sys.path.insert(0, str(source_dir / "bench"))
    try:
        import numpy_suite
    finally:
        sys.path.pop(0)
    examples = sorted(p.stem for p in (source_dir / "examples").glob("*.json"))
    assert sorted(numpy_suite.WORKLOADS) == examples
    for name in examples:
        graph = json.loads((source_dir / "examples" / f"{name}.json").read_text())
        inputs = [(n["name"], tuple(n["shape"])) for n in graph["nodes"] if n["op"] == "input"]
        assert inputs == numpy_suite.WORKLOADS[name][0], name


def test_table_on_one_workload(yirage_bin, source_dir, tmp_path):
    script = source_dir / "scripts" / "suite_table.py"
    command = [sys.executable, str(script), "--yirage", yirage_bin, "--search-seconds", "1",
               "--cache", str(tmp_path / "tuning.sqlite"), "ntrans"]
    # Two threads, as in CI, whatever this machine has; a fresh tuning cache, so it tunes.
    env = dict(os.environ, YIRAGE_CPU_THREADS="2")
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "[1/1] ntrans: searching" in result.stderr
    assert "2 threads for ours and numpy" in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("ntrans ")]
    assert len(rows) == 1, result.stdout
    # workload, winner (may hold spaces), tuning seconds, ours, numpy, numpy/ours
    match = re.fullmatch(r"ntrans +(.+?) +([\d.]+) s +([\d.]+) +([\d.]+) +([\d.]+)", rows[0])
    assert match, rows[0]
    ours, theirs, ratio = map(float, match.groups()[2:])
    assert ours > 0 and theirs > 0
    assert abs(ratio - theirs / ours) <= 0.01 * ratio + 0.01


def test_table_refuses_an_unknown_workload(yirage_bin, source_dir):
    script = source_dir / "scripts" / "suite_table.py"
    result = subprocess.run([sys.executable, str(script), "--yirage", yirage_bin, "nope"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "unknown workload 'nope'" in result.stderr
