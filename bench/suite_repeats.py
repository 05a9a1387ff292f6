#!/usr/bin/env python3
"""Several runs of bench/gpu_bench.py side by side: each row's speedup over the best peer in every
run, the geo-mean of each run, and the medians across runs, so that one lease's spread (mostly
the peers', see docs/design/cuda-findings.md) shows next to any single run's number.

    python3 bench/suite_repeats.py RUN1.json RUN2.json ... > bench/results/h200_suite_repeats.md
"""
import json
import math
import statistics
import sys


def main(paths):
    runs = [json.load(open(p)) for p in paths]
    keys = [(r["workload"], r["bs"]) for r in runs[0]["rows"]]
    print(f"# The suite run {len(runs)} times in one lease\n")
    print("Runs, in order: " + ", ".join(f"`{p}`" for p in paths) + ".\n")
    print("Commands: " + "; ".join(f"`{r['command']}`" for r in runs) + ".\n")
    print("Each cell: ours / best peer in µs (speedup). Every row of every run was correct: "
          + ("yes" if all(row["ours_correct"] for r in runs for row in r["rows"]) else "**no**")
          + ".\n")
    print("| workload | bs | " + " | ".join(f"run {i + 1}" for i in range(len(runs)))
          + " | median ours | median peer | median speedup |")
    print("|---|---|" + "---|" * (len(runs) + 3))
    medians = []
    for key in keys:
        cells, ours, peers, speedups = [], [], [], []
        for r in runs:
            row = next(x for x in r["rows"] if (x["workload"], x["bs"]) == key)
            ours.append(row["ours_us"])
            peers.append(row["best_peer_us"])
            speedups.append(row["speedup"])
            cells.append(f"{row['ours_us']:.1f} / {row['best_peer_us']:.1f} ({row['speedup']:.2f}×)")
        medians.append(statistics.median(speedups))
        print(f"| {key[0]} | {key[1]} | " + " | ".join(cells)
              + f" | {statistics.median(ours):.1f} | {statistics.median(peers):.1f}"
              f" | {medians[-1]:.2f}× |")
    geo = [r["geomean_speedup_vs_best_peer"] for r in runs]
    print("\nGeo-mean speedup of each run: " + ", ".join(f"{g:.2f}×" for g in geo)
          + f"; median {statistics.median(geo):.2f}×, lowest {min(geo):.2f}×, highest "
          f"{max(geo):.2f}×.")
    geo_of_medians = math.exp(sum(math.log(m) for m in medians) / len(medians))
    print(f"Geo-mean of the rows' median speedups: {geo_of_medians:.2f}×.")


if __name__ == "__main__":
    main(sys.argv[1:])
