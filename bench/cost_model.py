#!/usr/bin/env python3
"""How well the search's cost estimate predicts what the tuner then measures (issue 41's validation).

The search ranks its candidates by an estimated time (search/cost.cpp), written into each
candidate's label ("search #0 (fused, 1 kernel, estimated 2.65e-05 s)"); the tuner then profiles them on
the device and stores every measured time. This script compares the two, per graph and over all:

- MAPE: mean |estimated - measured| / measured, over every candidate with both (and over those
  measured above 100 µs alone);
- Kendall τ per graph, over its estimated candidates (graphs with two or more);
- top-1 hit rate: the estimate's first choice is the measured fastest of the estimated
  candidates, or within 5% of it.

The unfused graph carries no estimate in its label, so it is left out of every figure; the tuner
measures it always. Input: a tuning cache (SQLite, as `yirage optimize`, `yirage suite run` or the
GPU bench leave it) or a GPU suite JSON (bench/results/h100_suite.json).

    python3 bench/cost_model.py bench/results/h100_suite.json
    python3 bench/cost_model.py ~/.cache/yirage/tuning.sqlite

--rescore BIN scores today's model instead of the estimate a run recorded: for a tuning cache, BIN
(the build's tests/yirage_cost_rescore) predicts every stored candidate's graph, the unfused one
included, under an H200's description (its nominal rates), against the times the tuner measured.

    python3 bench/cost_model.py --rescore build/release/tests/yirage_cost_rescore CACHE.sqlite

--run-cpu tunes the suite's graphs (examples/*.json) on the cpu backend itself, twice each in fresh
tuning caches: with --profile-all, which measures every candidate the search ranked (the unfused
graph included, whose prediction `yirage optimize --json` reports under "ranked"), and with the
default top-k. It reports the same figures over the model's predictions (cost/cost_model.h:
"predicted" phases, library variants left out: the model does not rank them), plus each graph's
tuning wall time under top-k against profile-all and the time each chose, and writes a PNG of
predicted against measured (matplotlib when installed, else a plain log-log scatter).

    python3 bench/cost_model.py --run-cpu --yirage build/release/yirage --budget 20 \
        --out bench/results/cost_model_cpu
"""
import argparse
import json
import re
import sqlite3
import subprocess
import sys

from cost_accuracy import Accuracy  # bench/cost_accuracy.py: MAPE, Kendall τ, top-1
import cost_model_cpu  # bench/cost_model_cpu.py: the --run-cpu mode

ESTIMATE = re.compile(r"estimated ([0-9.eE+-]+) s")


def graphs_from_cache(path, predicted=None):
    """(name, [(label, measured_s)]) per entry of a tuning cache; with `predicted` ({(entry id,
    idx): seconds}), each label ends in today's estimate instead of the recorded one."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    entries = db.execute("SELECT id, backend, device_name FROM entries ORDER BY created").fetchall()
    for entry_id, backend, device in entries:
        rows = db.execute("SELECT idx, label, status, seconds FROM candidates WHERE entry_id = ? "
                          "ORDER BY idx", (entry_id,)).fetchall()
        candidates = []
        for idx, label, status, seconds in rows:
            if status != "ok" or seconds <= 0:
                continue
            if predicted is not None:
                if (entry_id, idx) not in predicted:
                    continue
                label = f"{label.split(' (')[0]} (estimated {predicted[(entry_id, idx)]:.3g} s)"
            candidates.append((label, seconds))
        yield f"{entry_id[:12]} ({backend}, {device})", candidates


def rescored(binary, cache):
    """{(entry id, idx): seconds} that `binary` (tests/yirage_cost_rescore) predicts."""
    out = subprocess.run([binary, cache], check=True, capture_output=True, text=True).stdout
    predicted = {}
    for line in out.splitlines():
        entry_id, idx, seconds = line.split("\t")
        predicted[(entry_id, int(idx))] = float(seconds)
    return predicted


def graphs_from_suite_json(path):
    for row in json.load(open(path))["rows"]:
        yield f"{row['workload']} bs{row['bs']}", [
            (c["label"], c["tuned_us"] * 1e-6) for c in row.get("candidates", [])
            if c["status"] == "ok" and c.get("tuned_us")]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", nargs="?", help="a tuning cache (.sqlite) or a GPU suite JSON")
    p.add_argument("--rescore", metavar="BIN",
                   help="tests/yirage_cost_rescore: score today's model on a tuning cache")
    cost_model_cpu.add_arguments(p)
    a = p.parse_args()
    if a.run_cpu:
        cost_model_cpu.run(a)
        return
    if not a.source:
        p.error("a source, or --run-cpu")
    if a.rescore and a.source.endswith(".json"):
        p.error("--rescore reads a tuning cache (.sqlite), which holds the candidates' graphs")
    if a.source.endswith(".json"):
        graphs = graphs_from_suite_json(a.source)
    else:
        graphs = graphs_from_cache(a.source, rescored(a.rescore, a.source) if a.rescore else None)
    accuracy = Accuracy()
    print(f"{'graph':40} {'cands':>5} {'tau':>6} {'top-1':>6}  estimated / measured µs")
    for name, candidates in graphs:
        estimated = [(float(m.group(1)), measured) for label, measured in candidates
                     if (m := ESTIMATE.search(label))]
        tau, top1 = accuracy.add_graph(estimated)
        pairs = ", ".join(f"{e * 1e6:.1f}/{m * 1e6:.1f}" for e, m in estimated)
        print(f"{name:40} {len(estimated):5} {'—' if tau is None else f'{tau:6.2f}':>6} "
              f"{'—' if top1 is None else ('yes' if top1 else 'no'):>6}  {pairs}")
    if not accuracy.errors:
        sys.exit("cost_model.py: no candidate with both an estimate and a measured time")
    print()
    print("\n".join(accuracy.summary("estimated")))
    print("Today's model on every candidate, the unfused graph included (H200 nominal rates)."
          if a.rescore else "The unfused graph has no estimate and is left out.")


if __name__ == "__main__":
    main()
