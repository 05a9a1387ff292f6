#!/usr/bin/env python3
"""The search at large: YiRage's superoptimizer on a corpus of graphs written for this purpose.

The suite's eight workloads are what the search was built against; this corpus is what it was
not. Each graph below stresses one thing a model brings: odd and prime dimensions, MoE-style
experts, QK-norm attention, LayerNorm + GELU, softmax over a dim that is not the last, f16 and
bf16. For every graph, in one run on this machine:

  1. the search alone (`yirage optimize --no-tune`): kernels before and after, whether the best
     µGraph is verified (proof and float check on every input distribution), the search's
     seconds and states, and its notes (why a graph stays unfused);
  2. the whole pipeline on the cpu backend (`yirage optimize --backend cpu`, a fresh tuning cache):
     search -> compile -> check -> profile -> select. The tuned winner's profiled time is set
     against the unfused graph's time from the same profile run.

Usage: python3 bench/search_power.py [--yirage build/release/yirage] [--budget 10]
           [--graphs a,b,...] [--export DIR] [--out bench/results/search_power]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy_suite  # bench/, beside this script: the machine facts the reports share


class Graph:
    """A kernel graph as the JSON file format writes it (src/ir/json.cpp); result types are
    inferred by YiRage on load."""

    def __init__(self):
        self.nodes, self.outputs = [], []

    def input(self, name, shape, dtype="f32"):
        self.nodes.append({"name": name, "op": "input", "dtype": dtype, "shape": list(shape)})
        return name

    def op(self, name, op, *inputs, **attrs):
        self.nodes.append({"name": name, "op": op, "inputs": list(inputs), **attrs})
        return name

    def output(self, tensor):
        self.outputs.append({"tensor": tensor, "name": tensor})

    def json(self):
        return {"schema": "yirage.kernel_graph", "version": 1, "nodes": self.nodes,
                "outputs": self.outputs}


def rmsnorm_linear(m, k, n, dtype="f32"):
    g = Graph()
    g.input("X", [m, k], dtype), g.input("G", [k], dtype), g.input("W", [k, n], dtype)
    g.op("normed", "rms_norm", "X", "G", normalized_shape=[k], eps=1e-6, has_weight=True)
    g.output(g.op("out", "matmul", "normed", "W"))
    return g


def linear_act(m, k, n, act, bias=False, dtype="f32"):
    g = Graph()
    g.input("X", [m, k], dtype), g.input("W", [k, n], dtype)
    y = g.op("xw", "matmul", "X", "W")
    if bias:
        g.input("B", [n], dtype)
        y = g.op("biased", "add", y, "B")
    g.output(g.op("out", act, y))
    return g


def gated_mlp(m, k, inter, act="silu", down=False, dtype="f32"):
    """act(X·Wg) * (X·Wu), then · Wd when `down` (a Llama/MoE expert)."""
    g = Graph()
    g.input("X", [m, k], dtype), g.input("Wg", [k, inter], dtype)
    g.input("Wu", [k, inter], dtype)
    g.op("gate", "matmul", "X", "Wg"), g.op("up", "matmul", "X", "Wu")
    g.op("act", act, "gate")
    h = g.op("h", "mul", "act", "up")
    if down:
        g.input("Wd", [inter, k], dtype)
        h = g.op("out", "matmul", h, "Wd")
    g.output(h)
    return g


def attention(heads, q_len, kv_len, head_dim, q_norm=False, dtype="f32"):
    """softmax(Q·Kᵀ·scale)·V with the softmax as the suite writes it (exp, sum, div); with
    `q_norm`, Q is RMS-normed per head first (QK-norm models norm K before caching it)."""
    g = Graph()
    g.input("Q", [heads, q_len, head_dim], dtype)
    g.input("Kt", [heads, head_dim, kv_len], dtype)
    g.input("V", [heads, kv_len, head_dim], dtype)
    q = "Q"
    if q_norm:
        g.input("Gq", [head_dim], dtype)
        q = g.op("q_normed", "rms_norm", "Q", "Gq", normalized_shape=[head_dim], eps=1e-6,
                 has_weight=True)
    g.op("scores", "matmul", q, "Kt")
    g.op("scaled", "mul_scalar", "scores", scalar=1.0 / math.sqrt(head_dim))
    g.op("e", "exp", "scaled")
    g.op("row_sum", "sum", "e", dim=2, keepdim=True)
    g.op("probs", "div", "e", "row_sum")
    g.output(g.op("out", "matmul", "probs", "V"))
    return g


def layernorm_gelu(m, n, linear_k=None, dtype="f32"):
    g = Graph()
    x = g.input("X", [m, linear_k or n], dtype)
    if linear_k:
        g.input("W", [linear_k, n], dtype)
        x = g.op("xw", "matmul", "X", "W")
    g.input("G", [n], dtype), g.input("B", [n], dtype)
    g.op("normed", "layer_norm", x, "G", "B", normalized_shape=[n], eps=1e-5, has_weight=True,
         has_bias=True)
    g.output(g.op("out", "gelu", "normed"))
    return g


def softmax_over(shape, dim, then_matmul_n=None, dtype="f32"):
    g = Graph()
    g.input("X", shape, dtype)
    y = g.op("probs", "softmax", "X", dim=dim)
    if then_matmul_n:
        g.input("W", [shape[-1], then_matmul_n], dtype)
        y = g.op("out", "matmul", y, "W")
    g.output(y)
    return g


def residual_rmsnorm_linear(m, k, n, dtype="f32"):
    g = Graph()
    g.input("X", [m, k], dtype), g.input("R", [m, k], dtype)
    g.input("G", [k], dtype), g.input("W", [k, n], dtype)
    g.op("h", "add", "X", "R")
    g.op("normed", "rms_norm", "h", "G", normalized_shape=[k], eps=1e-6, has_weight=True)
    g.output(g.op("out", "matmul", "normed", "W"))
    return g


def l2_normalize(m, n, dtype="f32"):
    """x / sqrt(sum(x²)) per row, as sentence-embedding models finish."""
    g = Graph()
    g.input("X", [m, n], dtype)
    g.op("sq", "square", "X")
    g.op("ss", "sum", "sq", dim=1, keepdim=True)
    g.op("inv", "rsqrt", "ss")
    g.output(g.op("out", "mul", "X", "inv"))
    return g


def gemm_softmax(m, k, n, dtype="f32"):
    g = Graph()
    g.input("X", [m, k], dtype), g.input("W", [k, n], dtype)
    g.op("logits", "matmul", "X", "W")
    g.output(g.op("probs", "softmax", "logits", dim=1))
    return g


# (name, what it stresses, graph)
CORPUS = [
    ("rmsnorm_linear_3x4000", "odd dims: 3 rows, 4000 deep", lambda: rmsnorm_linear(3, 4000, 1000)),
    ("rmsnorm_linear_prime", "prime dims", lambda: rmsnorm_linear(7, 1021, 509)),
    ("linear_relu_prime", "prime dims, epilogue", lambda: linear_act(5, 997, 263, "relu")),
    ("linear_bias_gelu_odd", "odd dims, bias + GELU epilogue",
     lambda: linear_act(9, 768, 3000, "gelu", bias=True)),
    ("gated_mlp_1408", "the wrongly rejected gated MLP: [8,2048], 1408 wide",
     lambda: gated_mlp(8, 2048, 1408)),
    ("geglu_odd", "GELU-gated MLP, odd width", lambda: gated_mlp(6, 1024, 1365, act="gelu")),
    ("moe_expert_16x1024", "MoE expert (gate, up, down), 704 wide",
     lambda: gated_mlp(16, 1024, 704, down=True)),
    ("moe_expert_4x2048", "MoE expert, few routed tokens, 352 wide",
     lambda: gated_mlp(4, 2048, 352, down=True)),
    ("qknorm_attention_decode", "QK-norm attention, decode, odd KV length",
     lambda: attention(8, 1, 333, 64, q_norm=True)),
    ("qknorm_attention_prefill", "QK-norm attention, prefill",
     lambda: attention(4, 64, 256, 64, q_norm=True)),
    ("attention_prime_kv", "attention, prime KV length", lambda: attention(4, 4, 509, 64)),
    ("layernorm_gelu", "LayerNorm + GELU", lambda: layernorm_gelu(16, 1024)),
    ("linear_layernorm_gelu", "Linear + LayerNorm + GELU", lambda: layernorm_gelu(8, 3072, 768)),
    ("softmax_dim0", "softmax over the first dim", lambda: softmax_over([512, 64], 0)),
    ("softmax_dim1_3d", "softmax over a middle dim", lambda: softmax_over([8, 200, 33], 1)),
    ("softmax_dim0_matmul", "softmax over dim 0, then a matmul",
     lambda: softmax_over([96, 128], 0, then_matmul_n=256)),
    ("residual_rmsnorm_linear", "residual add + RMSNorm + Linear",
     lambda: residual_rmsnorm_linear(4, 2048, 2048)),
    ("l2_normalize", "row L2 normalization", lambda: l2_normalize(32, 384)),
    ("gemm_softmax_f16", "GEMM + softmax in f16", lambda: gemm_softmax(4, 512, 2000, "f16")),
    ("rmsnorm_linear_bf16", "RMSNorm + Linear in bf16", lambda: rmsnorm_linear(4, 2048, 2048, "bf16")),
    ("gated_mlp_bf16", "gated MLP in bf16", lambda: gated_mlp(4, 1024, 2816, dtype="bf16")),
    ("layernorm_gelu_f16", "LayerNorm + GELU in f16", lambda: layernorm_gelu(16, 1000, dtype="f16")),
]


def run_json(cmd):
    """Runs a yirage command that prints one JSON object; returns (object or None, error line)."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        lines = (p.stderr or p.stdout).strip().splitlines()
        return None, lines[-1] if lines else f"exit {p.returncode}"
    try:
        return json.loads(p.stdout), ""
    except json.JSONDecodeError as e:
        return None, f"unreadable output: {e}"


def measure(yirage, name, path, budget, work):
    row = {"graph": name}
    base = [yirage, "optimize", path, "--backend", "cpu", "--budget", str(budget), "--seed", "0",
            "--threads", "2", "--json"]
    s, err = run_json(base + ["--no-tune"])
    if s is None:
        row["search_error"] = err
    else:
        # Every ranked µGraph is proved; the cost estimate may rank a fused one below the input.
        fewest = min([c["kernels"] for c in s["ranked"]] + [s["kernels"]])
        row.update({"input_kernels": s["input_kernels"], "kernels": fewest,
                    "best_estimated_kernels": s["kernels"],
                    "fused": fewest < s["input_kernels"], "verified": s["verified"],
                    "search_seconds": s["search_seconds"], "states": s["states"],
                    "candidates": s["candidates"], "verified_candidates": s["verified_candidates"],
                    "float_check": s["float_check"], "notes": s["notes"]})
    t, err = run_json(base + ["--cache", os.path.join(work, f"{name}.sqlite")])
    if t is None:
        row["tune_error"] = err
        return row
    unfused = [c for c in t["candidates"] if c["label"] == "unfused"]
    row.update({"winner": t["chosen"], "winner_seconds": t["chosen_seconds"],
                "unfused_seconds": unfused[0]["seconds"] if unfused else None,
                "tuned_candidates": [{k: c.get(k) for k in ("label", "status", "seconds")}
                                     for c in t["candidates"]]})
    return row


def why_not_fused(row):
    if "search_error" in row:
        return "search failed: " + row["search_error"]
    if row.get("fused"):
        return ""
    notes = "; ".join(row.get("notes") or [])
    return notes or (f"no proved candidate with fewer kernels: {row['states']} states, "
                     f"{row['candidates']} candidates, {row['verified_candidates']} verified")


def fmt_us(seconds):
    return f"{seconds * 1e6:10.1f}" if seconds and seconds > 0 else f"{'-':>10}"


def report_lines(rows, header):
    out = list(header)
    out.append(f"{'graph':<26} {'kern':>6} {'fused':>5} {'verif':>5} {'search s':>8} "
               f"{'states':>8} {'ours us':>10} {'unfused us':>10} {'x':>6}  winner")
    for r in rows:
        kern = f"{r.get('input_kernels', '?')}->{r.get('kernels', '?')}"
        ratio = ""
        if r.get("winner_seconds") and r.get("unfused_seconds"):
            ratio = f"{r['unfused_seconds'] / r['winner_seconds']:.2f}"
        out.append(f"{r['graph']:<26} {kern:>6} {str(r.get('fused', '-')):>5} "
                   f"{str(r.get('verified', '-')):>5} {r.get('search_seconds', 0):8.2f} "
                   f"{r.get('states', 0):>8} {fmt_us(r.get('winner_seconds'))} "
                   f"{fmt_us(r.get('unfused_seconds'))} {ratio:>6}  "
                   f"{r.get('winner', r.get('tune_error', ''))}")
    fused = sum(1 for r in rows if r.get("fused"))
    out.append("")
    out.append(f"fused into fewer kernels: {fused} of {len(rows)}")
    for r in rows:
        why = why_not_fused(r)
        if why:
            out.append(f"  not fused, {r['graph']}: {why}")
    out.append("")
    out.append("float check of the best µGraph (every input distribution):")
    for r in rows:
        if r.get("fused"):
            out.append(f"  {r['graph']}: {r.get('float_check', '')}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--yirage", default="build/release/yirage")
    ap.add_argument("--budget", type=float, default=10, help="search seconds per graph")
    ap.add_argument("--graphs", default="", help="comma-separated names (default: all)")
    ap.add_argument("--export", default="", help="only write the corpus as JSON files here")
    ap.add_argument("--out", default="", help="write OUT.txt and OUT.json")
    args = ap.parse_args()

    chosen = [c for c in CORPUS if not args.graphs or c[0] in args.graphs.split(",")]
    unknown = set(filter(None, args.graphs.split(","))) - {c[0] for c in CORPUS}
    if unknown:
        sys.exit(f"search_power.py: --graphs: unknown {', '.join(sorted(unknown))}; known: "
                 + ", ".join(c[0] for c in CORPUS))
    work = args.export or tempfile.mkdtemp(prefix="yirage-search-power-")
    os.makedirs(work, exist_ok=True)
    paths = {}
    for name, _, build in chosen:
        paths[name] = os.path.join(work, f"{name}.json")
        with open(paths[name], "w") as f:
            json.dump(build().json(), f, indent=1)
    if args.export:
        print(f"wrote {len(chosen)} graphs to {work}")
        return
    if not os.access(args.yirage, os.X_OK):
        sys.exit(f"search_power.py: --yirage {args.yirage}: not an executable; build it with "
                 "cmake --build --preset release --target yirage")

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    header = [f"# bench/search_power.py --budget {args.budget:g}  (commit {commit}, "
              f"{time.strftime('%Y-%m-%d', time.gmtime())})",
              f"# {numpy_suite.cpu_model()}, {os.cpu_count()} cores; "
              f"search and profile with 2 threads on the cpu backend",
              "# kern: kernels of the input graph -> of the proved µGraph with the fewest; fused: "
              "fewer than the input; verified: the best-estimated µGraph proved and float-checked",
              "# ours: the tuned winner's profiled median; unfused: the same profile run's time of "
              "the input graph; x = unfused / ours", ""]
    rows = []
    for i, (name, what, _) in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {name} ({what})", file=sys.stderr, flush=True)
        row = measure(args.yirage, name, paths[name], args.budget, work)
        row["stresses"] = what
        rows.append(row)
    lines = report_lines(rows, header)
    print("\n".join(lines))
    if args.out:
        with open(args.out + ".txt", "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(args.out + ".json", "w") as f:
            json.dump({"commit": commit, "budget": args.budget, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
