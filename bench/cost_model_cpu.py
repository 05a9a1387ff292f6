"""bench/cost_model.py --run-cpu: the cost model against the cpu backend's measurements, over the
suite's graphs (examples/*.json), with top-k tuning against profile-all (issue 41)."""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

from cost_accuracy import Accuracy  # bench/cost_accuracy.py: MAPE, Kendall τ, top-1

SEARCH_LABEL = re.compile(r"^search #(\d+) \(")
ROOT = Path(__file__).resolve().parent.parent


def add_arguments(p):
    p.add_argument("--run-cpu", action="store_true",
                   help="tune the suite on the cpu backend and compare the model with it")
    p.add_argument("--yirage", default=str(ROOT / "build/release/yirage"))
    p.add_argument("--graphs", default="", help="comma-separated names (default: every example)")
    p.add_argument("--budget", type=float, default=20, help="search seconds per graph")
    p.add_argument("--out", default="", help="write OUT.txt, OUT.json and OUT.png")
    p.add_argument("--calibrate", action="store_true",
                   help="calibrate the cpu device first (yirage calibrate) and start every fresh "
                   "tuning cache from that calibration, so the model predicts with measured rates")


def tune(yirage, graph, cache, budget, profile_all):
    args = [yirage, "optimize", str(graph), "--backend", "cpu", "--json", "--force",
            "--budget", str(budget), "--seed", "1", "--cache", str(cache)]
    if profile_all:
        args.append("--profile-all")
    start = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True)
    wall = time.monotonic() - start
    if p.returncode != 0:
        sys.exit(f"cost_model.py: {' '.join(args)} failed:\n{p.stderr}")
    return json.loads(p.stdout), wall


def pairs_of(report):
    """(label, predicted s, measured s) for every measured candidate the model predicted."""
    ranked = report["ranked"]
    out = []
    for c in report["candidates"]:
        if c["status"] != "ok" or c["seconds"] <= 0 or " + " in c["label"]:
            continue  # not measured, or a library variant (the model does not rank those)
        if c["label"] == "unfused":
            r = next((r for r in ranked if r["input_graph"]), None)
        else:
            m = SEARCH_LABEL.match(c["label"])
            r = ranked[int(m.group(1))] if m and int(m.group(1)) < len(ranked) else None
        if r is not None:
            out.append((c["label"], r["predicted"]["total"], c["seconds"]))
    return out


def scatter_png(path, points):
    """A log-log scatter of (predicted, measured) with the diagonal and decade lines, without
    text; matplotlib draws a labelled one when it is installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(5, 5))
        ax.loglog([m for _, m in points], [p for p, _ in points], "o", ms=4)
        lo = min(min(p, m) for p, m in points) / 2
        hi = max(max(p, m) for p, m in points) * 2
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_xlabel("measured s (cpu backend)")
        ax.set_ylabel("predicted s (cost model)")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        return "matplotlib"
    except ImportError:
        pass
    import math
    size, margin = 400, 20
    lo = math.floor(math.log10(min(min(p, m) for p, m in points)))
    hi = math.ceil(math.log10(max(max(p, m) for p, m in points)))
    hi = max(hi, lo + 1)
    img = [[255] * size for _ in range(size)]

    def px(v):
        return margin + int((math.log10(v) - lo) / (hi - lo) * (size - 2 * margin - 1))

    for d in range(lo, hi + 1):  # decade lines, light grey
        x = px(10.0 ** d)
        for t in range(size):
            img[t][x] = min(img[t][x], 220)
            img[size - 1 - x][t] = min(img[size - 1 - x][t], 220)
    for t in range(margin, size - margin):  # the diagonal: predicted = measured
        img[size - 1 - t][t] = 128
    for p, m in points:  # measured on x, predicted on y, 5x5 black dots
        x, y = px(m), size - 1 - px(p)
        for dy in range(-2, 3):
            for dx in range(-2, 3):
                if 0 <= y + dy < size and 0 <= x + dx < size:
                    img[y + dy][x + dx] = 0
    raw = b"".join(b"\x00" + bytes(row) for row in img)

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 0, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    Path(path).write_bytes(png)
    return f"plain scatter, log-log from 1e{lo} to 1e{hi} s on both axes"


def run(a):
    names = [n for n in a.graphs.split(",") if n] or sorted(
        p.stem for p in (ROOT / "examples").glob("*.json"))
    lines = []

    def say(line=""):
        print(line, flush=True)
        lines.append(line)

    load = os.getloadavg()[0]
    say(f"# bench/cost_model.py --run-cpu: the cost model (cost/cost_model.h) against the cpu "
        f"backend, search budget {a.budget:g} s, load average {load:.2f} at the start")
    say(f"{'graph':16} {'cands':>5} {'tau':>6} {'top-1':>6} {'all s':>7} {'top-k s':>7} "
        f"{'speedup':>7} {'all µs':>9} {'top-k µs':>9}  predicted/measured µs")
    accuracy, points, rows = Accuracy(), [], []
    wall_all = wall_topk = 0
    with tempfile.TemporaryDirectory() as tmp:
        calibrated = Path(tmp) / "calibrated.sqlite"
        if a.calibrate:
            start = time.monotonic()
            p = subprocess.run([a.yirage, "calibrate", "--backend", "cpu", "--cache",
                                str(calibrated)], capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"cost_model.py: yirage calibrate failed:\n{p.stderr}")
            say(f"# calibrated in {time.monotonic() - start:.1f} s: "
                + " ".join(p.stdout.split())[:300])

        def fresh_cache(file_name):
            path = Path(tmp) / file_name
            if a.calibrate:
                path.write_bytes(calibrated.read_bytes())
            return path

        for name in names:
            graph = ROOT / "examples" / f"{name}.json"
            full, t_all = tune(a.yirage, graph, fresh_cache(f"{name}-all.sqlite"), a.budget, True)
            topk, t_k = tune(a.yirage, graph, fresh_cache(f"{name}-k.sqlite"), a.budget, False)
            wall_all += t_all
            wall_topk += t_k
            pairs = pairs_of(full)
            points += [(pred, meas) for _, pred, meas in pairs]
            tau, top1 = accuracy.add_graph([(pred, meas) for _, pred, meas in pairs])
            rows.append({"graph": name, "pairs": pairs, "tau": tau, "top1": top1,
                         "profile_all_seconds": t_all, "top_k_seconds": t_k,
                         "profile_all_chosen": full["chosen"], "top_k_chosen": topk["chosen"],
                         "profile_all_chosen_seconds": full["chosen_seconds"],
                         "top_k_chosen_seconds": topk["chosen_seconds"]})
            shown = ", ".join(f"{p * 1e6:.1f}/{m * 1e6:.1f}" for _, p, m in pairs)
            say(f"{name:16} {len(pairs):5} {'—' if tau is None else f'{tau:6.2f}':>6} "
                f"{'—' if top1 is None else ('yes' if top1 else 'no'):>6} {t_all:7.1f} "
                f"{t_k:7.1f} {t_all / t_k:7.2f} {full['chosen_seconds'] * 1e6:9.1f} "
                f"{topk['chosen_seconds'] * 1e6:9.1f}  {shown}")
    say()
    for line in accuracy.summary("predicted"):
        say(line)
    say(f"tuning wall time: profile-all {wall_all:.1f} s, top-k {wall_topk:.1f} s "
        f"({wall_all / wall_topk:.2f}x); the search is the same in both, each in a fresh cache"
        + (" that holds only the device's calibration" if a.calibrate else
           " (uncalibrated: the capabilities' rough rates)"))
    say("Measured times are the tuner's medians on this machine; the unfused graph is included "
        "(its prediction is the input graph's in \"ranked\"), library variants are not.")
    if a.out:
        Path(a.out + ".txt").write_text("\n".join(lines) + "\n")
        Path(a.out + ".json").write_text(json.dumps(rows, indent=1) + "\n")
        if points:
            how = scatter_png(a.out + ".png", points)
            print(f"wrote {a.out}.txt, .json and .png ({how})")
