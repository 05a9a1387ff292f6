#!/usr/bin/env python3
"""The public suite on the GPU at fp16, ours against PyTorch, in one run (bench/gpu.sh calls it).

Ours: tests/cuda/yirage_cuda_bench, a subprocess of this script, which sends every workload
through YiRage's pipeline (tune::optimize on the cuda backend: search, compile, check, profile,
cache), checks the winner against YiRage's reference executor on fresh inputs, and times it with
CUDA events over CUDA-graph replays. The first round tunes into a tuning cache of its own; the
later rounds are cache hits that time the same winners again in a new process. Nothing of ours is
picked by hand.

With --backends cuda,triton the triton backend's own tuner choice is timed beside the cuda
backend's in every round (the same driver, --backend triton), with the backend that "auto" picks:
the one whose winner the tuner measured fastest (tune::optimize_on_fastest_backend's rule).

Peers, timed in this process with CUDA events around 200 launches (median of 7 batches): torch
eager, eager replayed in a CUDA graph, and torch.compile(mode="max-autotune-no-cudagraphs")
replayed in a CUDA graph; for gqa also scaled_dot_product_attention, eager and in a CUDA graph. Each peer is compiled once and timed again in every round. Ours and
the graph peers are both timed as CUDA-graph replays between two events, so neither pays a host
cost the other does not. The same run measures a device-to-device copy (bytes read + written per
second) and an fp16 matrix product, the two ceilings the floors are computed from.

Writes OUT/h200_suite.json and OUT/h200_suite.md: per row the median over the rounds, and the
geo-mean of the medians with the range of the rounds' geo-means.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

dev = "cuda"
H = 4096


def rnd(*shape, scale=1.0):
    return (torch.rand(*shape, device=dev) * 2 - 1).mul_(scale).half()


# The suite's programs (src/suite/suite.cpp), with its input scales.
def wl_rmsnorm_linear(bs):
    args = (rnd(2 * bs, H), rnd(H), rnd(H, 6144, scale=1 / 64))
    return (lambda X, G, W: F.rms_norm(X, (H,), G, 1e-6) @ W), args, 2 * (2 * bs) * H * 6144


def wl_gated_mlp(bs):
    args = (rnd(8 * bs, H), rnd(H, H, scale=1 / 64), rnd(H, H, scale=1 / 64))
    return (lambda X, W1, W2: F.silu(X @ W1) * (X @ W2)), args, 2 * 2 * (8 * bs) * H * H


def wl_gqa(bs):
    args = (rnd(2 * bs, 256, 64, scale=1 / 8), rnd(2 * bs, 64, 4096, scale=1 / 8), rnd(2 * bs, 4096, 64))

    def f(Q, K, V):
        E = torch.exp(Q @ K)
        return (E / E.sum(-1, keepdim=True)) @ V

    return f, args, 2 * 2 * (2 * bs) * 256 * 4096 * 64


def wl_lora(bs):
    args = (rnd(16, 256), rnd(256, H, scale=1 / 16), rnd(256, 16, scale=1 / 16), rnd(16, H, scale=1 / 4))
    return (lambda X, W, A, B: X @ W + (X @ A) @ B), args, 2 * 16 * 256 * H + 2 * 16 * 256 * 16 + 2 * 16 * 16 * H


def wl_ntrans(bs):
    args = (rnd(8 * bs, H), rnd(8 * bs, H), rnd(8 * bs, H))

    def f(Hs, X, al):
        return F.rms_norm(X + al * (F.rms_norm(Hs, (H,), eps=1e-6) + X), (H,), eps=1e-6)

    return f, args, 0


def wl_gemm_softmax(bs):
    args = (rnd(8, 2048), rnd(2048, 32000, scale=1 / 64))
    return (lambda X, W: torch.softmax(X @ W, -1)), args, 2 * 8 * 2048 * 32000


def wl_gemm_layernorm(bs):
    args = (rnd(16, H), rnd(H, H, scale=1 / 64))
    return (lambda X, W: F.layer_norm(X @ W, (H,))), args, 2 * 16 * H * H


def wl_llama_mlp_block(bs):
    args = (rnd(bs, H), rnd(H), rnd(H, 2 * 14336, scale=1 / 64), rnd(14336, H, scale=1 / 128))

    def f(X, G, Wgu, Wd):
        g, u = (F.rms_norm(X, (H,), G, 1e-6) @ Wgu).chunk(2, dim=-1)
        return (F.silu(g) * u) @ Wd + X

    return f, args, 2 * bs * H * 2 * 14336 + 2 * bs * 14336 * H


WORKLOADS = {
    "rmsnorm_linear": (wl_rmsnorm_linear, True), "gated_mlp": (wl_gated_mlp, True),
    "gqa": (wl_gqa, True), "lora": (wl_lora, False), "ntrans": (wl_ntrans, True),
    "gemm_softmax": (wl_gemm_softmax, False), "gemm_layernorm": (wl_gemm_layernorm, False),
    "llama_mlp_block": (wl_llama_mlp_block, True),
}


def time_fn(fn, args, iters=200, reps=7):
    for _ in range(10):
        fn(*args)
    torch.cuda.synchronize()
    meds = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(iters):
            fn(*args)
        e.record()
        torch.cuda.synchronize()
        meds.append(s.elapsed_time(e) / iters * 1000.0)
    return statistics.median(meds)


def graphed(fn, args):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(*args)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn(*args)
    return lambda *a: g.replay()


def copy_bandwidth():
    n = 1 << 30  # 1 GiB each way, far past the L2
    x = torch.empty(n, dtype=torch.uint8, device=dev).random_(0, 255)
    y = torch.empty_like(x)
    us = time_fn(lambda: y.copy_(x), (), iters=20, reps=7)
    return 2 * n / (us * 1e-6)


def matmul_rate():
    a = torch.randn(8192, 8192, dtype=torch.float16, device=dev)
    b = torch.randn(8192, 8192, dtype=torch.float16, device=dev)
    us = time_fn(lambda: a @ b, (), iters=10, reps=5)
    return 2 * 8192 ** 3 / (us * 1e-6)


def run_ours(a, cache, round_index, rows_file=None, backend="cuda"):
    # Later rounds are cache hits of the winners the first round checked: they only time.
    cmd = [a.ours_bin, "--backend", backend, "--workloads", a.workloads, "--cache", cache,
           "--search-seconds", str(a.search_seconds)] + (["--no-check"] if round_index else [])
    t0 = time.time()
    # Rows are read as the driver prints them (and appended to rows_file), so that a deadline
    # loses only the row in progress; the first round's stderr, the tuner's log (candidates,
    # their times, the winner), passes straight through.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                            stderr=None if round_index == 0 else subprocess.DEVNULL)
    rows = {}
    for line in proc.stdout:
        row = json.loads(line)
        print("ours", json.dumps({k: v for k, v in row.items() if k != "candidates"}), flush=True)
        rows[(row["workload"], row["bs"])] = row
        if rows_file:
            with open(rows_file, "a") as f:
                f.write(json.dumps(row) + "\n")
    proc.wait()
    print(f"ours ({backend}) round {round_index + 1} done in {time.time() - t0:.0f} s", flush=True)
    return rows


def make_peers(name, bs, no_compile):
    mk, _ = WORKLOADS[name]
    torch.manual_seed(0)
    fn, args, flops = mk(bs)
    out = fn(*args)
    nbytes = sum(x.numel() * x.element_size() for x in args) + out.numel() * out.element_size()
    peers = {"eager": fn, "eager_graph": graphed(fn, args)}
    errors = {}
    if name == "gqa":
        # Attention's library kernel, with the keys stored as it wants them ([b, keys, d], as a KV
        # cache holds them) and the workload's scale of 1; checked against the eager output.
        Q, K, V = args
        Kt = K.transpose(-1, -2).contiguous()
        sdpa = lambda Q, K, V: F.scaled_dot_product_attention(Q, Kt, V, scale=1.0)
        errors["sdpa_max_abs_err"] = (sdpa(*args).float() - out.float()).abs().max().item()
        peers["sdpa"] = sdpa
        peers["sdpa_graph"] = graphed(sdpa, args)
    if not no_compile:
        try:
            cf = torch.compile(fn, mode="max-autotune-no-cudagraphs", dynamic=False)
            cf(*args)
            peers["compile_graph"] = graphed(cf, args)
        except Exception as ex:  # reported, not hidden
            errors["compile_error"] = repr(ex)[:300]
    return peers, args, nbytes, flops, errors


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ours-bin", required=True)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--rounds", type=int, default=3, help="full suite runs, each timing every row")
    p.add_argument("--search-seconds", type=float, default=30, help="the search's budget per graph")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer")
    p.add_argument("--cache", help="a tuning cache to start from (default: a new one in --out)")
    p.add_argument("--tune-only", action="store_true",
                   help="run the first round alone (tune into --cache and check the winners), "
                   "write OUT/tune_rows.jsonl and stop: a later run with the same --cache times")
    p.add_argument("--tune-rows", help="tune_rows.jsonl of an earlier --tune-only run into --cache, "
                   "whose tuning times the results then report")
    p.add_argument("--backends", default="cuda",
                   help="the backends whose tuner choice is timed, the first in the main table")
    p.add_argument("--command", default=" ".join(sys.argv))
    a = p.parse_args()
    names = a.workloads.split(",")
    os.makedirs(a.out, exist_ok=True)
    cache = a.cache or os.path.join(a.out, "tuning.sqlite")
    if not a.cache and os.path.exists(cache):
        os.remove(cache)  # the first round tunes from scratch
    t0 = time.time()
    if a.tune_only:
        rows_file = os.path.join(a.out, "tune_rows.jsonl")
        if os.path.exists(rows_file):
            os.remove(rows_file)
        for backend in a.backends.split(","):
            ours = run_ours(a, cache, 0, rows_file, backend)
            for (name, bs), row in ours.items():
                print(f"{backend:7} {name:16} bs{bs}  correct={row.get('correct')}  "
                      f"{row.get('median_us', float('nan')):8.1f} us  "
                      f"{row.get('winner', row.get('error'))}")
        return
    tuned_earlier = {}
    if a.tune_rows:
        for line in open(a.tune_rows):
            row = json.loads(line)
            if row.get("backend", "cuda") == a.backends.split(",")[0]:
                tuned_earlier[(row["workload"], row["bs"])] = row

    copy_bw = copy_bandwidth()
    mm_rate = matmul_rate()
    print(f"copy {copy_bw / 1e12:.2f} TB/s, fp16 matmul {mm_rate / 1e12:.0f} TFLOP/s", flush=True)

    keys = [(n, bs) for n in names for bs in ([1, 8] if WORKLOADS[n][1] else [1])]
    peers = {}
    for key in keys:
        peers[key] = make_peers(*key, a.no_compile)
        print(f"peers of {key[0]} bs{key[1]} ready at {time.time() - t0:.0f} s", flush=True)

    backends = a.backends.split(",")
    rounds, others = [], []  # others: per round, {backend: rows} of the backends after the first
    for r in range(a.rounds):
        ours = run_ours(a, cache, r, backend=backends[0])
        others.append({b: run_ours(a, cache, r, backend=b) for b in backends[1:]})
        times = {}
        for key in keys:
            fns, args, _, _, _ = peers[key]
            times[key] = {k: time_fn(f, args) for k, f in fns.items()}
        rounds.append((ours, times))
        save(a, keys, peers, rounds, copy_bw, mm_rate, t0, complete=r + 1 == a.rounds,
             tuned_earlier=tuned_earlier, others=others)
    print(open(os.path.join(a.out, "h200_suite.md")).read())


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def summarise(key, peers, rounds, copy_bw, mm_rate, tuned_earlier):
    _, _, nbytes, flops, errors = peers[key]
    first = rounds[0][0].get(key, {"error": "no row from the driver"})
    r = {"workload": key[0], "bs": key[1], "bytes": nbytes, "flops": flops,
         "floor_us": max(nbytes / copy_bw, flops / mm_rate) * 1e6,
         "hbm_floor_us": nbytes / copy_bw * 1e6, **errors}
    for k in ("winner", "kernels", "candidates", "tune_seconds", "error"):
        if k in first:
            r[k] = first[k]
    earlier = tuned_earlier.get(key)
    if earlier:  # tuned by a --tune-only run into the same cache, earlier in the lease
        r["tune_seconds"] = earlier.get("tune_seconds")
        r["tuned_earlier_winner"] = earlier.get("winner")
        r["tuned_earlier_correct"] = earlier.get("correct")
    ours_rows = [o.get(key, {}) for o, _ in rounds]
    # Checked in the first round; the later ones time the same cached winner.
    r["ours_winners"] = sorted({o.get("winner", "?") for o in ours_rows})
    r["ours_correct"] = bool(first.get("correct")) and len(r["ours_winners"]) == 1
    r["ours_rel_l2"] = first.get("rel_l2")
    r["cache_hit_first_round"] = first.get("cache_hit")
    r["ours_us_runs"] = [o.get("median_us") for o in ours_rows]
    for peer in ("eager", "eager_graph", "compile_graph", "sdpa", "sdpa_graph"):
        r[f"{peer}_us_runs"] = [t[key].get(peer) for _, t in rounds]
        r[f"{peer}_us"] = median_or_none(r[f"{peer}_us_runs"])
    best_peer_runs = [min(v for v in t[key].values()) for _, t in rounds]
    r["best_peer_us_runs"] = best_peer_runs
    r["best_peer_us"] = statistics.median(best_peer_runs)
    r["speedup_runs"] = [p / o if o else None for p, o in zip(best_peer_runs, r["ours_us_runs"])]
    if r["ours_correct"] and all(r["ours_us_runs"]):
        r["ours_us"] = statistics.median(r["ours_us_runs"])
        r["speedup"] = r["best_peer_us"] / r["ours_us"]
        r["ours_fraction_of_copy_bw"] = r["hbm_floor_us"] / r["ours_us"]
    return r


def beside(key, backend, main_row, others):
    """The row of `backend` (not the first of --backends) for `key`: its winner checked in the
    first round, its median time over the rounds, and which backend "auto" picks by the tuners'
    own measured times."""
    runs = [o.get(backend, {}).get(key, {}) for o in others]
    first = runs[0] if runs else {}
    r = {"backend": backend, "winner": first.get("winner"), "error": first.get("error"),
         "correct": bool(first.get("correct")), "rel_l2": first.get("rel_l2"),
         "kernels": first.get("kernels"), "tuned_winner_us": first.get("tuned_winner_us"),
         "us_runs": [x.get("median_us") for x in runs]}
    if r["correct"] and all(r["us_runs"]):
        r["us"] = statistics.median(r["us_runs"])
    tuned = {backend: r["tuned_winner_us"] if r["correct"] else None,
             main_row["backend"]: main_row.get("tuned_winner_us") if main_row["ours_correct"]
             else None}
    tuned = {b: t for b, t in tuned.items() if t}
    r["auto_picks"] = min(tuned, key=tuned.get) if tuned else None
    return r


def save(a, keys, peers, rounds, copy_bw, mm_rate, t0, complete, tuned_earlier, others):
    rows = [summarise(k, peers, rounds, copy_bw, mm_rate, tuned_earlier) for k in keys]
    backends = a.backends.split(",")
    for key, row in zip(keys, rows):
        row["backend"] = backends[0]
        row["tuned_winner_us"] = rounds[0][0].get(key, {}).get("tuned_winner_us")
        row["beside"] = [beside(key, b, row, others) for b in backends[1:]]
    per_round = []
    for i in range(len(rounds)):
        s = [r["speedup_runs"][i] for r in rows if r["ours_correct"] and r["speedup_runs"][i]]
        per_round.append(geomean(s) if len(s) == len(rows) else None)
    result = {"command": a.command, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "commit": os.environ.get("GIT_COMMIT", "unknown"),
              "copy_bytes_per_s": copy_bw, "fp16_matmul_flops_per_s": mm_rate,
              "rounds": len(rounds), "search_seconds": a.search_seconds, "backends": backends,
              "tuned_by_earlier_run": bool(tuned_earlier),
              "geomean_speedup_vs_best_peer": geomean([r["speedup"] for r in rows if "speedup" in r])
              if all("speedup" in r for r in rows) else None,
              "geomean_per_round": per_round, "complete": complete, "rows": rows,
              "seconds": time.time() - t0}
    json.dump(result, open(os.path.join(a.out, "h200_suite.json"), "w"), indent=1)
    write_md(result, os.path.join(a.out, "h200_suite.md"))


def write_md(res, path):
    f = lambda v, fmt="{:.1f}": fmt.format(v) if v is not None else "—"
    rng = [g for g in res["geomean_per_round"] if g]
    lines = [
        f"# The public suite on the {res['gpu']}, fp16: what YiRage's tuner chose on the cuda "
        "backend, against PyTorch",
        "",
        f"Produced in one run on the device machine at commit `{res['commit']}` by:",
        "",
        "```bash",
        res["command"],
        "```",
        "",
        f"GPU: {res['gpu']}; torch {res['torch']}. Measured in the same run: device-to-device copy "
        f"{res['copy_bytes_per_s'] / 1e12:.2f} TB/s (read + write), fp16 matmul "
        f"{res['fp16_matmul_flops_per_s'] / 1e12:.0f} TFLOP/s (8192³).",
        "",
        f"*ours* is what `tune::optimize` chose on the cuda backend (search budget "
        f"{res['search_seconds']:.0f} s a graph; candidates: the search's µGraphs and the unfused "
        "graph, whose kernel-level matmuls are cuBLAS calls), checked against YiRage's reference "
        "executor on fresh random inputs with poisoned outputs (rel. L2 ≤ 1e-2, no NaN) in the "
        "first round, and timed "
        "with CUDA events around CUDA-graph replays. *peer* is the best of torch eager, eager in a "
        "CUDA graph and torch.compile(max-autotune-no-cudagraphs) in a CUDA graph, and for gqa "
        "scaled_dot_product_attention eager and in a CUDA graph (its keys stored [b, keys, d]), "
        "timed the same way (events around 200 launches, median of 7 batches). Every time is the "
        "median over "
        f"{res['rounds']} rounds of the whole suite in one lease (ours: a new process each round, "
        + ("every round a cache hit of the winners that a `--tune-only` run tuned into the same "
           "cache earlier in the lease, the first round checking them again"
           if res.get("tuned_by_earlier_run") else "the first tuning, the others cache hits")
        + "). *speedup* = peer / ours; *of copy bw* = "
        "(bytes moved / our time) / measured copy bandwidth; *floor* = max(bytes / copy "
        "bandwidth, FLOPs / matmul rate).",
        "",
        "| workload | bs | correct | rel L2 | winner | kernels | ours µs | eager | eager+graph | "
        "compile+graph | sdpa | sdpa+graph | peer | speedup | speedup range | floor | of copy bw |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        sr = [s for s in r["speedup_runs"] if s]
        lines.append(
            f"| {r['workload']} | {r['bs']} | {'yes' if r['ours_correct'] else 'NO'} | "
            f"{f(r.get('ours_rel_l2'), '{:.1e}')} | {r.get('winner', r.get('error', '—'))[:60]} | {r.get('kernels', '—')} | "
            f"{f(r.get('ours_us'))} | {f(r['eager_us'])} | {f(r['eager_graph_us'])} | "
            f"{f(r['compile_graph_us'])} | {f(r['sdpa_us'])} | {f(r['sdpa_graph_us'])} | "
            f"{f(r['best_peer_us'])} | "
            f"{f(r.get('speedup'), '{:.2f}×')} | "
            f"{(f'{min(sr):.2f}–{max(sr):.2f}×' if sr else '—')} | {f(r['floor_us'])} | "
            f"{f(r.get('ours_fraction_of_copy_bw'), '{:.0%}')} |")
    geo = res["geomean_speedup_vs_best_peer"]
    lines += ["", f"Geo-mean of the per-row medians over the best peer: **{f(geo, '{:.2f}×')}** "
              f"over the {len(res['rows'])} rows above; the rounds' own geo-means ranged "
              + (f"{min(rng):.2f}× to {max(rng):.2f}×." if rng else "— (no complete round)."), ""]
    if not res["complete"]:
        lines += ["**This run was cut short**: the rounds above are all it measured.", ""]
    lines += beside_md(res, f)
    lines += ["The tuner's candidates per row, from its cache (µs are the tuner's own profile, by "
              "the backend's clock: CUDA events over CUDA-graph replays, the inputs rotated through "
              "copies that exceed twice the L2, so a little above the table's fixed-input time; "
              "it ranks them):", "",
              "| workload | bs | candidate | status | tuned µs | note |", "|---|---|---|---|---|---|"]
    for r in res["rows"]:
        for c in r.get("candidates", []):
            mark = " **(chosen)**" if c.get("chosen") else ""
            lines.append(f"| {r['workload']} | {r['bs']} | {c['label']}{mark} | {c['status']} | "
                         f"{f(c.get('tuned_us'))} | {c.get('message', '')[:120]} |")
    open(path, "w").write("\n".join(lines) + "\n")


def beside_md(res, f):
    """The other backends' table: each one's tuner choice beside the first backend's."""
    lines = []
    for i, backend in enumerate(res["backends"][1:]):
        main = res["backends"][0]
        lines += [f"**{backend} beside {main}.** The {backend} backend's own tuner choice per row "
                  f"(`yirage_cuda_bench --backend {backend}`, the same search budget and checks), "
                  f"timed by that backend's clock in every round (the triton backend's: the host's "
                  f"steady clock around 100 back-to-back driver launches and a synchronize, "
                  f"no CUDA graph, so its host launch cost is counted); *auto picks* is the backend "
                  f"whose winner the tuner measured fastest, the rule of `backend=\"auto\"` "
                  f"(tune::optimize_on_fastest_backend) over these two.", "",
                  f"| workload | bs | {backend} winner | correct | kernels | {backend} µs | "
                  f"{main} µs | {backend} / {main} | auto picks |", "|---|---|---|---|---|---|---|---|---|"]
        ratios = []
        for r in res["rows"]:
            b = r["beside"][i]
            ratio = b["us"] / r["ours_us"] if b.get("us") and r.get("ours_us") else None
            if ratio:
                ratios.append(ratio)
            lines.append(f"| {r['workload']} | {r['bs']} | {(b['winner'] or b['error'] or '—')[:60]} | "
                         f"{'yes' if b['correct'] else 'NO'} | {b['kernels'] or '—'} | "
                         f"{f(b.get('us'))} | {f(r.get('ours_us'))} | {f(ratio, '{:.2f}×')} | "
                         f"{b['auto_picks'] or '—'} |")
        lines += ["", f"Geo-mean of {backend} / {main} over the {len(ratios)} rows both ran: "
                  f"{f(geomean(ratios), '{:.2f}×')}.", ""]
    return lines


if __name__ == "__main__":
    main()
