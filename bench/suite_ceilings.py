#!/usr/bin/env python3
"""How far the geo-mean could go with the peers of one suite run: each row's speedup if our call
took its floor (bytes / measured copy bandwidth, or FLOPs / measured matmul rate) plus the launch
gap a call pays on the device (1.7 µs between graph replays on the H200). That ceiling is
optimistic: a bare read of cold memory reached 78-84% of the copy bandwidth, and a kernel that
computes reads no faster (both measured in docs/design/cuda-findings.md).

Rows whose floor is under twice the gap are latency-bound: their time is launches, load latency
and dependent chains, not bytes. The third geo-mean puts only the byte-bound rows at their
ceilings and keeps the others as measured: what the byte-bound rows alone could add, with kernels
that read at the copy bandwidth, against these peers.

    python3 bench/suite_ceilings.py bench/results/h200_suite.json [--gap 1.7]
"""
import argparse
import json
import math


def geo(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("suite_json")
    ap.add_argument("--gap", type=float, default=1.7, help="µs a call pays beyond its kernel")
    args = ap.parse_args()
    run = json.load(open(args.suite_json))
    print(f"Ceilings for `{args.suite_json}` (launch gap {args.gap} µs a call).\n")
    print("| workload | bs | bound | ours µs | peer µs | speedup | floor + gap µs | speedup at it |")
    print("|---|---|---|---|---|---|---|---|")
    measured, ceiling, mixed = [], [], []
    for r in run["rows"]:
        at_floor = r["floor_us"] + args.gap
        best = r["best_peer_us"] / at_floor
        latency = r["floor_us"] < 2 * args.gap
        bound = ("latency" if latency else
                 "bytes" if math.isclose(r["floor_us"], r["hbm_floor_us"]) else "FLOPs")
        measured.append(r["speedup"])
        ceiling.append(best)
        mixed.append(best if bound == "bytes" else r["speedup"])
        print(f"| {r['workload']} | {r['bs']} | {bound} | {r['ours_us']:.1f} | "
              f"{r['best_peer_us']:.1f} | {r['speedup']:.2f}× | {at_floor:.1f} | {best:.2f}× |")
    print(f"\nGeo-mean as measured: {geo(measured):.2f}×. Every row at floor + gap: "
          f"{geo(ceiling):.2f}×. Byte-bound rows at floor + gap, the others as measured: "
          f"{geo(mixed):.2f}×.")


if __name__ == "__main__":
    main()
