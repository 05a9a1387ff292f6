"""Eager PyTorch, torch.compile (Inductor) and torch.compile(backend="yirage") on the CPU, in one
run: the suite's workloads as nn.Modules (tests/python_pkg/torch_modules.py) and a Llama decoder
layer at decode shapes. Each module is compiled and warmed up first (compile time is not timed;
YiRage's tuning cache is whatever $YIRAGE_CACHE_DIR holds), its outputs checked against eager,
then the three are timed in turns, one call at a time, `--repeats` rounds; the table prints the
median and range of each and the ratios of the medians (above 1: YiRage is faster).

    python3 bench/torch_bench.py --scale 16 --repeats 9 --budget 3 --out bench/results/torch_cpu.txt
"""
import argparse
import math
import os
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python_pkg"))
import torch_modules as tm  # noqa: E402


def modules(scale, only):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    rows = []
    for name, (module, shapes) in tm.suite_modules(scale).items():
        rows.append((name, module, tm.suite_inputs(name, shapes, generator)))
    hidden = max(4096 // scale, 64)
    heads = max(32 // scale, 2)  # Llama 3 8B's 32 query and 8 KV heads, as far as they go
    layer = tm.LlamaDecoderLayer(hidden=hidden, heads=heads, kv_heads=max(heads // 4, 1),
                                 intermediate=hidden * 7 // 2)
    rows.append(("llama_layer_decode", layer,
                 tm.llama_inputs(layer, seq=1, past=127, generator=generator)))
    return [r for r in rows if not only or r[0] in only]


def time_call(fn, inputs):
    start = time.perf_counter()
    fn(*inputs)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=8, help="divide the suite's sizes by this")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--budget", type=float, default=5.0, help="YiRage search seconds")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lines = []

    def say(line):
        print(line, flush=True)
        lines.append(line)

    say(f"# {platform.processor() or platform.machine()}, {args.threads} threads, torch "
        f"{torch.__version__}, load average {os.getloadavg()[0]:.1f}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    say(f"# python3 bench/torch_bench.py --scale {args.scale} --repeats {args.repeats} "
        f"--budget {args.budget}{' --only ' + ' '.join(args.only) if args.only else ''}")
    say("# f32, the suite's sizes / scale; µs per call: median [min-max] of the repeats")
    results = []
    with torch.no_grad():
        for name, module, inputs in modules(args.scale, args.only):
            torch._dynamo.reset()
            runners = {"eager": module,
                       "inductor": torch.compile(module),
                       "yirage": torch.compile(module, backend="yirage",
                                               options={"budget": args.budget})}
            expected = module(*inputs)
            for label, fn in runners.items():
                for _ in range(2):
                    out = fn(*inputs)
                torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-3,
                                           msg=lambda m: f"{name} {label}: {m}")
            times = {label: [] for label in runners}
            for _ in range(args.repeats):
                for label, fn in runners.items():
                    times[label].append(time_call(fn, inputs))
            medians = {k: statistics.median(v) for k, v in times.items()}
            cells = " ".join(f"{k} {medians[k] * 1e6:9.1f} [{min(v) * 1e6:.0f}-{max(v) * 1e6:.0f}]"
                             for k, v in times.items())
            ratios = (medians["eager"] / medians["yirage"], medians["inductor"] / medians["yirage"])
            results.append((name, ratios))
            say(f"{name:20s} {cells}  eager/yirage {ratios[0]:.2f} inductor/yirage {ratios[1]:.2f}")
    suite = [r for n, r in results if n != "llama_layer_decode"]
    if suite:
        geo = [math.exp(statistics.fmean(math.log(r[i]) for r in suite)) for i in (0, 1)]
        say(f"suite geo-mean: eager/yirage {geo[0]:.2f} (target 2), inductor/yirage {geo[1]:.2f} "
            "(target 1.5)")
    for n, r in results:
        if n == "llama_layer_decode":
            say(f"llama layer at decode: inductor/yirage {r[1]:.2f} (target 1.3)")
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
