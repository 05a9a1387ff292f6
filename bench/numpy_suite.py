"""The public workload suite (docs/suite.md, bs 1, f32) as numpy programs, and the timing rules
every CPU peer here is measured by: shared by bench/cpu_bench.py and scripts/suite_table.py so
that both time numpy the same way.

Set OPENBLAS_NUM_THREADS (and OMP_NUM_THREADS) before importing this module: it imports numpy,
and OpenBLAS reads them once, when numpy loads it.
"""
import math
import platform
import statistics
import time

import numpy as np

HIDDEN, INTER = 4096, 14336


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def l3_bytes():
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            text = f.read().strip()
        return int(text[:-1]) * (1 << 20 if text.endswith("M") else 1 << 10)
    except (OSError, ValueError):
        return 32 << 20


def timeit(fn, arg_sets, min_seconds=0.5, reps=7):
    """Median seconds per call over `reps` batches, cycling through the argument sets."""
    for i in range(max(3, len(arg_sets))):
        fn(*arg_sets[i % len(arg_sets)])
    t0 = time.perf_counter()
    fn(*arg_sets[0])
    one = max(time.perf_counter() - t0, 1e-6)
    n = max(len(arg_sets), int(min_seconds / reps / one))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for i in range(n):
            fn(*arg_sets[i % len(arg_sets)])
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times)


def rotated(make_args):
    """Copies of the inputs so that together they exceed 2 x L3 (at most 256)."""
    first = make_args()
    size = sum(a.nbytes for a in first)
    copies = max(1, min(256, math.ceil(2 * l3_bytes() / size)))
    return [first] + [make_args() for _ in range(copies - 1)]


# ---- the workloads: numpy programs, shapes, bytes and FLOPs ----------------------------------

def rms(x, eps=1e-6):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


def silu(x):
    return x / (1 + np.exp(-x))


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def layer_norm(x, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps)


def llama_mlp(x, g, wgu, wd):
    gu = rms(x) * g @ wgu
    return (silu(gu[:, :INTER]) * gu[:, INTER:]) @ wd + x


# name -> (input shapes in graph order, scales, numpy fn, flops)
WORKLOADS = {
    "rmsnorm_linear": ([("X", (2, HIDDEN)), ("G", (HIDDEN,)), ("W", (HIDDEN, 6144))],
                       lambda X, G, W: (rms(X) * G) @ W, 2 * 2 * HIDDEN * 6144),
    "gated_mlp": ([("X", (8, HIDDEN)), ("W1", (HIDDEN, HIDDEN)), ("W2", (HIDDEN, HIDDEN))],
                  lambda X, A, B: silu(X @ A) * (X @ B), 2 * 2 * 8 * HIDDEN * HIDDEN),
    "gqa": ([("Q", (2, 256, 64)), ("K", (2, 64, 4096)), ("V", (2, 4096, 64))],
            lambda Q, K, V: (lambda E: (E / E.sum(-1, keepdims=True)) @ V)(np.exp(Q @ K)),
            2 * 2 * 2 * 256 * 64 * 4096),
    "lora": ([("X", (16, 256)), ("W", (256, HIDDEN)), ("A", (256, 16)), ("B", (16, HIDDEN))],
             lambda X, W, A, B: X @ W + (X @ A) @ B, 2 * 16 * 256 * HIDDEN + 2 * 16 * 16 * (256 + HIDDEN)),
    "ntrans": ([("H", (8, HIDDEN)), ("X", (8, HIDDEN)), ("alpha", (8, HIDDEN))],
               lambda H, X, al: rms(X + al * (rms(H) + X)), 0),
    "gemm_softmax": ([("X", (8, 2048)), ("W", (2048, 32000))],
                     lambda X, W: softmax(X @ W), 2 * 8 * 2048 * 32000),
    "gemm_layernorm": ([("X", (16, HIDDEN)), ("W", (HIDDEN, HIDDEN))],
                       lambda X, W: layer_norm(X @ W), 2 * 16 * HIDDEN * HIDDEN),
    "llama_mlp_block": ([("X", (1, HIDDEN)), ("G", (HIDDEN,)), ("Wgu", (HIDDEN, 2 * INTER)),
                         ("Wd", (INTER, HIDDEN))],
                        llama_mlp, 2 * HIDDEN * 2 * INTER + 2 * INTER * HIDDEN),
}
SCALES = {"W": 1 / 64, "W1": 1 / 64, "W2": 1 / 64, "Q": 1 / 8, "K": 1 / 8, "Wgu": 1 / 64,
          "Wd": 1 / 128}
OUT_SHAPES = {"rmsnorm_linear": (2, 6144), "gated_mlp": (8, HIDDEN), "gqa": (2, 256, 64),
              "lora": (16, HIDDEN), "ntrans": (8, HIDDEN), "gemm_softmax": (8, 32000),
              "gemm_layernorm": (16, HIDDEN), "llama_mlp_block": (1, HIDDEN)}


def numpy_args(name, rng):
    return [(rng.uniform(-1, 1, size=s).astype(np.float32) * np.float32(SCALES.get(n, 1)))
            for n, s in WORKLOADS[name][0]]


def bytes_moved(name, elem):
    shapes = [s for _, s in WORKLOADS[name][0]] + [OUT_SHAPES[name]]
    return sum(math.prod(s) for s in shapes) * elem


def time_numpy(name, seed=1):
    """Median seconds of numpy's unfused `name`, over copies of its inputs that exceed 2 x L3."""
    rng = np.random.default_rng(seed)
    return timeit(WORKLOADS[name][1], rotated(lambda: numpy_args(name, rng)))
