#!/usr/bin/env python3
"""CPU benchmark of YiRage's cpu backend on the public workload suite (docs/suite.md, bs 1).

Measured in one run on one machine:
  - ours, fused: the fastest µGraph `yirage optimize --backend cpu` profiled (search -> compile ->
    profile; a fresh tuning cache, so every time comes from this run);
  - ours, unfused: the same run's profile of the op-by-op graph;
  - "ours" is the tuner's choice, which may call OpenBLAS for its matmuls where that measured
    faster (a "+ OpenBLAS" label in the chosen column); "fused" is the best generated µGraph;
  - numpy + OpenBLAS (unfused), f32;
  - ONNX Runtime (CPU execution provider), the same program as an ONNX model, f32;
  - the 2-thread copy bandwidth, and SGEMM 1024^3 (ours vs OpenBLAS).
Every peer runs with 2 threads and, like our profiler, cycles through copies of its inputs
so that together they exceed twice the last-level cache: small weights are not timed from cache.
The bf16 rows run our kernels on bf16 tensors; numpy and ONNX Runtime have no bf16 CPU path for
these ops, so their f32 times are the comparison there. Floors: bytes the workload must move /
copy bandwidth, and FLOPs / the best measured SGEMM rate; the reported fraction is floor / ours.

Usage: python3 bench/cpu_bench.py [--yirage build/release/yirage] [--out bench/results/cpu_suite]
"""
import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")
os.environ.setdefault("OMP_NUM_THREADS", "2")
import numpy as np  # noqa: E402
from numpy_suite import (HIDDEN, INTER, WORKLOADS, bytes_moved, l3_bytes,  # noqa: E402
                         numpy_args, rotated, timeit)

THREADS = 2


# ---- ONNX models of the same programs ---------------------------------------------------------

def onnx_model(name):
    from onnx import TensorProto, helper
    nodes, inits = [], []
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(n, f, list(s)) for n, s in WORKLOADS[name][0]]
    def c(nm, v):
        inits.append(helper.make_tensor(nm, f, [], [float(v)]))
        return nm
    def n(op, ins, out, **kw):
        nodes.append(helper.make_node(op, ins, [out], **kw))
        return out
    def rmsn(x, p, eps=1e-6):
        sq = n("Mul", [x, x], p + "sq")
        ms = n("ReduceMean", [sq], p + "ms", axes=[-1], keepdims=1)
        d = n("Sqrt", [n("Add", [ms, c(p + "eps", eps)], p + "mse")], p + "d")
        return n("Div", [x, d], p + "out")
    def silu_(x, p):
        return n("Mul", [x, n("Sigmoid", [x], p + "sig")], p + "silu")
    if name == "rmsnorm_linear":
        n("MatMul", [n("Mul", [rmsn("X", "r"), "G"], "xg"), "W"], "out")
    elif name == "gated_mlp":
        n("Mul", [silu_(n("MatMul", ["X", "W1"], "a"), "s"), n("MatMul", ["X", "W2"], "b")], "out")
    elif name == "gqa":
        e = n("Exp", [n("MatMul", ["Q", "K"], "qk")], "e")
        s = n("ReduceSum", [e, "axes"], "s", keepdims=1)
        inits.append(helper.make_tensor("axes", TensorProto.INT64, [1], [-1]))
        n("MatMul", [n("Div", [e, s], "p"), "V"], "out")
    elif name == "lora":
        n("Add", [n("MatMul", ["X", "W"], "base"),
                  n("MatMul", [n("MatMul", ["X", "A"], "down"), "B"], "delta")], "out")
    elif name == "ntrans":
        hx = n("Add", [rmsn("H", "h"), "X"], "hx")
        n("Identity", [rmsn(n("Add", ["X", n("Mul", ["alpha", hx], "sc")], "res"), "o")], "out")
    elif name == "gemm_softmax":
        n("Softmax", [n("MatMul", ["X", "W"], "l")], "out", axis=-1)
    elif name == "gemm_layernorm":
        inits.append(helper.make_tensor("ones", f, [HIDDEN], [1.0] * HIDDEN))
        n("LayerNormalization", [n("MatMul", ["X", "W"], "p"), "ones"], "out", axis=-1,
          epsilon=1e-5)
    elif name == "llama_mlp_block":
        gu = n("MatMul", [n("Mul", [rmsn("X", "r"), "G"], "xg"), "Wgu"], "gu")
        inits.append(helper.make_tensor("split", TensorProto.INT64, [2], [INTER, INTER]))
        nodes.append(helper.make_node("Split", [gu, "split"], ["g", "u"], axis=-1))
        h = n("Mul", [silu_("g", "s"), "u"], "h")
        n("Add", [n("MatMul", [h, "Wd"], "down"), "X"], "out")
    out = helper.make_tensor_value_info("out", f, None)
    graph = helper.make_graph(nodes, name, inputs, [out], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def ort_time(name, arg_sets):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = THREADS
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(onnx_model(name), opts, providers=["CPUExecutionProvider"])
    names = [n for n, _ in WORKLOADS[name][0]]
    feeds = [dict(zip(names, args)) for args in arg_sets]
    ref = WORKLOADS[name][1](*arg_sets[0])
    got = sess.run(None, feeds[0])[0]
    err = float(np.max(np.abs(got - ref)) / (np.max(np.abs(ref)) + 1e-12))
    if err > 1e-3:
        raise RuntimeError(f"ONNX Runtime disagrees with numpy on {name}: rel err {err}")
    return timeit(lambda feed: sess.run(None, feed), [(fd,) for fd in feeds])


# ---- machine rates ---------------------------------------------------------------------------

def copy_bandwidth(mb=512):
    """Bytes read + written per second by two threads copying halves of a large array."""
    src = np.ones(mb << 18, dtype=np.float32)
    dst = np.empty_like(src)
    half = src.size // 2
    def part(i):
        np.copyto(dst[i * half:(i + 1) * half], src[i * half:(i + 1) * half])
    def both():
        ts = [threading.Thread(target=part, args=(i,)) for i in range(THREADS)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    best = min(timeit(both, [()], min_seconds=1.0, reps=5) for _ in range(2))
    return 2 * src.nbytes / best


def run_yirage(yirage, graph_file, budget, env):
    cmd = [yirage, "optimize", graph_file, "--backend", "cpu", "--json", "--budget", str(budget)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def sgemm_graph(path):
    g = {"schema": "yirage.kernel_graph", "version": 1,
         "nodes": [{"name": "A", "op": "input", "dtype": "f32", "shape": [1024, 1024]},
                   {"name": "B", "op": "input", "dtype": "f32", "shape": [1024, 1024]},
                   {"name": "C", "op": "matmul", "inputs": ["A", "B"]}],
         "outputs": [{"tensor": "C", "name": "C"}]}
    with open(path, "w") as f:
        json.dump(g, f)


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--yirage", default="build/release/yirage")
    ap.add_argument("--out", default="bench/results/cpu_suite")
    ap.add_argument("--budget", type=float, default=30, help="search seconds per workload")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    args = ap.parse_args()
    yirage = os.path.abspath(args.yirage)
    tmp = tempfile.mkdtemp(prefix="yirage-cpu-bench-")
    env = dict(os.environ, YIRAGE_CACHE_DIR=os.path.join(tmp, "cache"), YIRAGE_CPU_THREADS=str(THREADS))
    names = args.workloads.split(",")
    lines, rows = [], []
    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    say(f"# python3 bench/cpu_bench.py {' '.join(sys.argv[1:])}")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    say(f"# machine: {cpu}, {os.cpu_count()} cpus, L3 {l3_bytes() >> 20} MiB, {platform.platform()}")
    say(f"# date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {THREADS} threads everywhere")
    import onnxruntime
    say(f"# numpy {np.__version__}, onnxruntime {onnxruntime.__version__}")

    bw = copy_bandwidth()
    say(f"copy bandwidth (2 threads, read+write): {bw / 1e9:.1f} GB/s")
    sg = os.path.join(tmp, "sgemm.json")
    sgemm_graph(sg)
    r = run_yirage(yirage, sg, 1, env)
    ours_sgemm = next(c["seconds"] for c in r["candidates"] if c["label"] == "unfused")
    rng = np.random.default_rng(0)
    A, B = (rng.standard_normal((1024, 1024), dtype=np.float32) for _ in range(2))
    blas_sgemm = timeit(lambda a, b: a @ b, [(A, B)])
    flop = 2 * 1024 ** 3
    say(f"SGEMM 1024^3: ours {flop / ours_sgemm / 1e9:.1f} GFLOP/s, OpenBLAS "
        f"{flop / blas_sgemm / 1e9:.1f} GFLOP/s, ours/OpenBLAS {blas_sgemm / ours_sgemm:.2f}")
    matrix_rate = max(flop / ours_sgemm, flop / blas_sgemm)
    say()

    peers = {}
    for dtype in args.dtypes.split(","):
        gdir = os.path.join(tmp, dtype)
        subprocess.run([yirage, "suite", "export", gdir, "--dtype", dtype], check=True,
                       capture_output=True)
        for name in names:
            r = run_yirage(yirage, os.path.join(gdir, name + ".json"), args.budget, env)
            ok = [c for c in r["candidates"] if c["status"] == "ok"]
            unfused = next((c["seconds"] for c in ok if c["label"] == "unfused"), None)
            # Generated fused kernels only; "+ OpenBLAS" variants call the library for matmuls.
            fused = [c for c in ok if c["label"] != "unfused" and " + " not in c["label"]]
            best_fused = min((c["seconds"] for c in fused), default=None)
            ours = r["chosen_seconds"]
            if name not in peers:  # numpy and ONNX Runtime run f32 (see the docstring)
                rng = np.random.default_rng(1)
                sets = rotated(lambda: numpy_args(name, rng))
                t_ort = None
                try:
                    t_ort = ort_time(name, sets)
                except Exception as e:  # noqa: BLE001 - reported, not hidden
                    say(f"# ONNX Runtime failed on {name}: {e}")
                peers[name] = (timeit(WORKLOADS[name][1], sets), t_ort)
                del sets
            t_np, t_ort = peers[name]
            elem = 4 if dtype == "f32" else 2
            floor_mem = bytes_moved(name, elem) / bw
            floor_flop = WORKLOADS[name][2] / matrix_rate
            floor = max(floor_mem, floor_flop)
            rows.append({"workload": name, "dtype": dtype, "ours_s": ours, "fused_s": best_fused,
                         "unfused_s": unfused, "numpy_s": t_np, "ort_s": t_ort,
                         "chosen": r["chosen"], "floor_s": floor,
                         "floor_kind": "bandwidth" if floor_mem >= floor_flop else "compute",
                         "bytes": bytes_moved(name, elem), "flops": WORKLOADS[name][2],
                         "candidates": r["candidates"]})
    shutil.rmtree(tmp, ignore_errors=True)

    ms = lambda s: f"{s * 1e3:9.3f}" if s else "        -"
    say(f"{'workload':16} {'dtype':5} {'ours ms':>9} {'fused':>9} {'unfused':>9} {'numpy':>9} "
        f"{'ORT':>9} {'x numpy':>8} {'x ORT':>7} {'floor%':>7} {'floor':>9}  chosen")
    for x in rows:
        vs_np = x["numpy_s"] / x["ours_s"]
        vs_ort = x["ort_s"] / x["ours_s"] if x["ort_s"] else float("nan")
        x["speedup_numpy"], x["speedup_ort"] = vs_np, vs_ort
        x["floor_fraction"] = x["floor_s"] / x["ours_s"]
        say(f"{x['workload']:16} {x['dtype']:5} {ms(x['ours_s'])} {ms(x['fused_s'])} "
            f"{ms(x['unfused_s'])} {ms(x['numpy_s'])} {ms(x['ort_s'])} {vs_np:8.2f} {vs_ort:7.2f} "
            f"{100 * x['floor_fraction']:6.1f}% {x['floor_kind']:>9}  {x['chosen']}")
    summary = {}
    for dtype in args.dtypes.split(","):
        sel = [x for x in rows if x["dtype"] == dtype]
        # The best any kernel could do: every workload at its floor. numpy's own fraction of the
        # floor caps the speedup over it, so this says which geo-mean targets are reachable.
        ceiling = geomean([x["numpy_s"] / x["floor_s"] for x in sel])
        summary[dtype] = {"geomean_vs_numpy": geomean([x["speedup_numpy"] for x in sel]),
                          "geomean_vs_ort": geomean([x["speedup_ort"] for x in sel]),
                          "geomean_ceiling_vs_numpy": ceiling}
        say(f"geo-mean {dtype}: {summary[dtype]['geomean_vs_numpy']:.2f}x over numpy+OpenBLAS, "
            f"{summary[dtype]['geomean_vs_ort']:.2f}x over ONNX Runtime; ceiling {ceiling:.2f}x "
            f"over numpy (every workload at its floor)")
        say("  numpy at its floor: " + ", ".join(
            f"{x['workload']} {100 * x['floor_s'] / x['numpy_s']:.0f}%" for x in sel))
    for name in ("rmsnorm_linear", "gated_mlp", "llama_mlp_block"):
        for x in rows:
            if x["workload"] == name and x["dtype"] == "f32":
                frac = x["bytes"] / x["ours_s"] / bw
                say(f"{name} f32 bs1: {x['bytes'] / x['ours_s'] / 1e9:.1f} GB/s = {100 * frac:.0f}% "
                    f"of the 2-thread copy bandwidth")

    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(args.out + ".json", "w") as f:
        json.dump({"command": lines[0], "copy_bandwidth_Bps": bw, "sgemm_ours_s": ours_sgemm,
                   "sgemm_openblas_s": blas_sgemm, "summary": summary, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
