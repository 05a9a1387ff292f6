#!/usr/bin/env python3
"""Two GPU backends' tuner choices side by side, from the rows yirage_cuda_bench printed.

Reads JSON-lines files of yirage_cuda_bench rows (each row names its backend, workload, bs, the
winner, whether it was checked against the reference executor, and median_us, the backend's own
clock), groups them per backend and row, and prints a Markdown table: each backend's winner, the
median and range of its timings, the ratio, and the backend that "auto" picks, by the rule of
tune::optimize_on_fastest_backend (the tuner's own measured time of each backend's winner).
Use it where a lease had no time for gpu_bench.py's rounds against PyTorch.

    python3 bench/backend_rows.py --first cuda --second triton rows1.jsonl rows2.jsonl ...
"""
import argparse
import json
import math
import statistics


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--first", default="cuda")
    p.add_argument("--second", default="triton")
    a = p.parse_args()
    rows = {}  # (backend, workload, bs) -> list of rows
    order = []
    for path in a.files:
        for line in open(path):
            r = json.loads(line)
            key = (r["workload"], r["bs"])
            if key not in order:
                order.append(key)
            rows.setdefault((r.get("backend", "cuda"), *key), []).append(r)

    def summary(backend, key):
        rs = rows.get((backend, *key), [])
        checked = [r for r in rs if r.get("checked")]
        times = [r["median_us"] for r in rs if r.get("median_us")]
        tuned = [r["tuned_winner_us"] for r in rs if r.get("tuned_winner_us")]
        return {"winners": sorted({r.get("winner", r.get("error", "?")) for r in rs}),
                "correct": bool(checked) and all(r.get("correct") for r in checked),
                "checks": len(checked), "times": times,
                "median": statistics.median(times) if times else None,
                "tuned": tuned[0] if tuned else None}

    f, s = a.first, a.second
    print(f"| workload | bs | {f} winner | {f} µs (median, range, n) | {s} winner | "
          f"{s} µs (median, range, n) | {s} / {f} | correct, checks ({f} / {s}) | auto picks |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = []
    picks = {f: 0, s: 0}
    for key in order:
        x, y = summary(f, key), summary(s, key)
        ratio = y["median"] / x["median"] if x["median"] and y["median"] else None
        if ratio:
            ratios.append(ratio)
        # The tuner's own time of each winner, as auto compares them; a winner the bench checked
        # and found wrong is out.
        tuned = {b: v["tuned"] for b, v in ((f, x), (s, y))
                 if v["tuned"] and (v["correct"] or not v["checks"])}
        pick = min(tuned, key=tuned.get) if tuned else None
        if pick:
            picks[pick] += 1

        def checked(v):
            if not v["checks"]:
                return "not checked"
            return f"{'yes' if v['correct'] else 'NO'} ({v['checks']})"

        def cell(v):
            if not v["times"]:
                return "—"
            return (f"{v['median']:.1f} ({min(v['times']):.1f}–{max(v['times']):.1f}, "
                    f"{len(v['times'])})")

        print(f"| {key[0]} | {key[1]} | {'; '.join(x['winners'])[:48]} | {cell(x)} | "
              f"{'; '.join(y['winners'])[:48]} | {cell(y)} | "
              f"{f'{ratio:.2f}×' if ratio else '—'} | "
              f"{checked(x)} / {checked(y)} | {pick or '—'} |")
    if ratios:
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"\nGeo-mean of {s} / {f} over the {len(ratios)} rows both ran: {geo:.2f}×; "
              f"auto picks {f} for {picks[f]} rows and {s} for {picks[s]}.")


if __name__ == "__main__":
    main()
