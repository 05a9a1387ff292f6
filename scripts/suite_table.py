#!/usr/bin/env python3
"""The main job's table: what `yirage suite run` chose and measured for each public workload, beside
numpy's unfused version of the same program timed on the same machine in the same run.

It runs `yirage suite run --json`, whose progress lines pass through to stderr as they come; each
workload's time is the profiled median of the winner tune::optimize chose (searched, compiled,
checked and profiled on a first run; taken from the tuning cache and timed again on a later one).
Then it times numpy (bs 1, f32) with as many threads as ours use and inputs rotated past the
last-level cache, as our profiler does, and prints one row per workload: the winner, the tuning
time (or "cache hit"), ours, numpy, and numpy / ours (above 1: ours is faster).

With --backends cpu,opencl it tunes on each backend in turn (`--backend NAME`) and prints each
one's winner and time beside numpy's, and numpy / each.

Usage: python3 scripts/suite_table.py [--yirage build/release/yirage] [--search-seconds S]
                                      [--cache FILE] [--force] [--backends A,B] [WORKLOAD ...]
"""
import argparse
import json
import math
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Ours and numpy's OpenBLAS get the same threads: YIRAGE_CPU_THREADS where set, else every core
# this process may use (the cpu backend's own default). OpenBLAS reads its variable when numpy
# loads, so it is set before the import.
THREADS = int(os.environ.get("YIRAGE_CPU_THREADS") or len(os.sched_getaffinity(0)))
os.environ["YIRAGE_CPU_THREADS"] = str(THREADS)
os.environ["OPENBLAS_NUM_THREADS"] = str(THREADS)
os.environ["OMP_NUM_THREADS"] = str(THREADS)
sys.path.insert(0, str(ROOT / "bench"))
import numpy as np  # noqa: E402
import numpy_suite  # noqa: E402


def run_yirage(args, backend=None):
    """One dict per workload from `yirage suite run --json`; its stderr (progress) passes through."""
    cmd = [args.yirage, "suite", "run", "--json", "--search-seconds", str(args.search_seconds)]
    cmd += ["--backend", backend] if backend else []
    cmd += ["--cache", args.cache] if args.cache else []
    cmd += ["--force"] if args.force else []
    cmd += args.workloads
    rows = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
        for line in proc.stdout:
            rows.append(json.loads(line))
    if proc.returncode != 0:
        sys.exit(f"suite_table: {' '.join(cmd)} exited with status {proc.returncode}")
    return rows


def time_peers(rows):
    """numpy's median seconds per workload, timed after ours so that the two never overlap."""
    times = {}
    for i, row in enumerate(rows):
        name = row["workload"]
        print(f"[{i + 1}/{len(rows)}] {name}: timing numpy...", end="", file=sys.stderr,
              flush=True)
        times[name] = numpy_suite.time_numpy(name)
        print(f" {times[name] * 1e6:.1f} µs", file=sys.stderr, flush=True)
    return times


def print_table(rows, numpy_seconds):
    print(f"{'workload':16} {'winner':22} {'tuning':>10} {'ours µs':>10} {'numpy µs':>10} "
          f"{'numpy/ours':>10}")
    ratios = []
    for row in rows:
        ours = row["steady_seconds"]
        theirs = numpy_seconds[row["workload"]]
        ratios.append(theirs / ours)
        tuning = "cache hit" if row["cache_hit"] else f"{row['tune_seconds']:.1f} s"
        print(f"{row['workload']:16} {row['winner']:22} {tuning:>10} {ours * 1e6:10.1f} "
              f"{theirs * 1e6:10.1f} {ratios[-1]:10.2f}")
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    tuning = sum(row["tune_seconds"] + row["compile_seconds"] for row in rows)
    hits = sum(row["cache_hit"] for row in rows)
    print(f"geo-mean numpy/ours: {geomean:.2f}; tuning and compiling: {tuning:.1f} s in all "
          f"({hits} of {len(rows)} from the tuning cache)")


def print_backends_table(backends, rows_by_backend, numpy_seconds):
    """One row per workload: each backend's winner and time, numpy's, and numpy / each backend."""
    header = f"{'workload':16}"
    for b in backends:
        header += f" {b + ' winner':22} {b + ' µs':>12}"
    header += f" {'numpy µs':>10}" + "".join(f" {'numpy/' + b:>12}" for b in backends)
    print(header)
    ratios = {b: [] for b in backends}
    for i, row in enumerate(rows_by_backend[backends[0]]):
        name = row["workload"]
        theirs = numpy_seconds[name]
        line = f"{name:16}"
        for b in backends:
            r = rows_by_backend[b][i]
            line += f" {r['winner']:22} {r['steady_seconds'] * 1e6:12.1f}"
        line += f" {theirs * 1e6:10.1f}"
        for b in backends:
            ratios[b].append(theirs / rows_by_backend[b][i]["steady_seconds"])
            line += f" {ratios[b][-1]:12.3f}"
        print(line)
    for b in backends:
        geomean = math.exp(sum(math.log(r) for r in ratios[b]) / len(ratios[b]))
        print(f"geo-mean numpy/{b}: {geomean:.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workloads", nargs="*", help="workloads (default: all)")
    ap.add_argument("--yirage", default=str(ROOT / "build/release/yirage"))
    ap.add_argument("--search-seconds", type=float, default=5,
                    help="search budget per workload (default 5)")
    ap.add_argument("--cache", help="tuning database (default: yirage's)")
    ap.add_argument("--force", action="store_true", help="tune again despite cache hits")
    ap.add_argument("--backends", help="comma-separated backends to tune on, each in its own "
                    "column (default: yirage's default backend)")
    args = ap.parse_args()
    unknown = [w for w in args.workloads if w not in numpy_suite.WORKLOADS]
    if unknown:
        ap.error(f"unknown workload {unknown[0]!r}; known: {', '.join(numpy_suite.WORKLOADS)}")
    if not os.access(args.yirage, os.X_OK):
        ap.error(f"{args.yirage} is not an executable; build it first (cmake --build --preset "
                 f"release --target yirage)")

    # Other work on the machine slows whichever side it overlaps, so the load goes on record.
    print(f"# {numpy_suite.cpu_model()}, {THREADS} threads for ours and numpy; L3 "
          f"{numpy_suite.l3_bytes() >> 20} MiB; numpy {np.__version__}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    print("# bs 1, f32; ours: the profiled median of tune::optimize's winner; numpy: unfused, "
          "median of 7 batches; inputs rotated past the L3 on both sides", flush=True)
    start = time.perf_counter()
    if args.backends:
        backends = args.backends.split(",")
        rows_by_backend = {b: run_yirage(args, b) for b in backends}
        tuned_at = time.perf_counter()
        numpy_seconds = time_peers(rows_by_backend[backends[0]])
        print_backends_table(backends, rows_by_backend, numpy_seconds)
    else:
        rows = run_yirage(args)
        tuned_at = time.perf_counter()
        numpy_seconds = time_peers(rows)
        print_table(rows, numpy_seconds)
    print(f"wall: yirage {tuned_at - start:.1f} s, numpy {time.perf_counter() - tuned_at:.1f} s")


if __name__ == "__main__":
    main()
