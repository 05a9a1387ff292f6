#!/usr/bin/env python3
"""YiRage on Ray, measured: what Ray Serve adds to a request, what a second replica gains, and
what tuning a model's block graphs over Ray tasks takes against tuning them in one process.

1. Overhead: the p50 (and p90) latency of `--requests` sequential one-token greedy completions
   sent straight to `yirage serve`, and through Ray Serve (its HTTP proxy, yirage.ray's ingress,
   one engine replica) to the same server code, both with one thread and the same options.
2. Scaling: serve_bench.py's load (`--streams` concurrent streamed greedy completions of up to
   `--max-tokens` tokens, `--requests-per-stream` each, from its asyncio client) on 1 and on 2
   replicas of one thread, printing output tokens/s of the round's wall time, the mean time to
   first token and the failed requests.
3. Tuning: the model's block graphs (yr.LLM.block_graphs) superoptimized one after another in this
   process, then by yirage.ray.tune_graphs over `--workers` Ray tasks at a time, each from an
   empty cache, with the options the engine's own load uses.

The clients, Ray's proxy and controller share the machine's cores with the replicas, so on a small
machine the second replica competes with them: the numbers say what this machine gives, no more.

    python3 bench/ray_bench.py --yirage build/release/yirage \
        --model "$(bash scripts/fetch-model.sh)" --out bench/results/ray_epyc.txt
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_bench import free_port, measure_round  # noqa: E402  (the serving bench's load)

PROMPT = "The capital of France is"
CONTEXT = 512


def one_token(url):
    body = json.dumps({"prompt": PROMPT, "max_tokens": 1, "temperature": 0}).encode()
    request = urllib.request.Request(url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as r:
        r.read()
    return time.perf_counter() - start


def latencies(url, n):
    for _ in range(5):  # warm-up: connections, the prefix cache, Ray's routing state
        one_token(url)
    return sorted(one_token(url) for _ in range(n))


def pct(values, q):
    return values[min(len(values) - 1, int(q * len(values)))] * 1e3


def direct_server(args):
    process = subprocess.Popen(
        [args.yirage, "serve", "--model", args.model, "--port", "0", "--threads", "1",
         "--context", str(CONTEXT), "--kv-memory", "64", "--hand-written"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = process.stdout.readline().strip()
    if "ready" not in process.stdout.readline():
        process.kill()
        raise SystemExit("yirage serve did not start")
    return process, url


def ray_app(replicas, port):
    from ray import serve

    import yirage.ray

    serve.run(yirage.ray.deployment(args.model, num_replicas=replicas, threads=1,
                                    fused_blocks=False, context_length=CONTEXT, kv_memory_mib=64),
              name="bench", route_prefix="/")
    return f"http://127.0.0.1:{port}"


def tuning(out):
    import yirage as yr
    import yirage.ray

    graphs = yr.LLM(args.model, threads=1, fused_blocks=False).block_graphs()
    config = {"max_candidates": 3, "profile_seconds": 0.1}  # llm/fused_blocks.cpp's
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        for _, graph in graphs:
            graph.superoptimize(backend="cpu", budget=2,
                                config=dict(config, cache=os.path.join(tmp, "local.sqlite")))
        local = time.perf_counter() - start
        start = time.perf_counter()
        yirage.ray.tune_graphs(graphs, backend="cpu", budget=2, config=config,
                               cache=os.path.join(tmp, "ray.sqlite"))
        distributed = time.perf_counter() - start
    out(f"tuning {len(graphs)} block graphs: in this process {local:.1f} s; "
        f"over Ray, {args.workers} tasks at a time: {distributed:.1f} s "
        f"({local / distributed:.2f}x)")


def main():
    import ray
    from ray import serve

    lines = []

    def out(line):
        print(line, flush=True)
        lines.append(line)

    out(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores; ray "
        f"{ray.__version__}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"load average {os.getloadavg()[0]:.1f}")
    out(f"# model {os.path.basename(args.model)}, hand-written kernels, 1 thread per server")

    process, url = direct_server(args)
    try:
        direct = latencies(url, args.requests)
    finally:
        process.terminate()
        process.wait()

    port = free_port()
    # Logical CPUs: the two replicas of one thread, or `--workers` tuning tasks of one CPU each.
    ray.init(num_cpus=max(args.workers, 2), include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    url = ray_app(1, port)
    through_ray = latencies(url, args.requests)
    out(f"one-token completion, {args.requests} sequential: direct p50 {pct(direct, .5):.1f} ms "
        f"p90 {pct(direct, .9):.1f} ms; through Ray Serve p50 {pct(through_ray, .5):.1f} ms "
        f"p90 {pct(through_ray, .9):.1f} ms; Ray adds {pct(through_ray, .5) - pct(direct, .5):.1f}"
        f" ms at p50")

    for replicas in (1, 2):
        url = ray_app(replicas, port)
        measure_round(url, 1, 1, 4, first_prompt=10**6)  # warm-up
        r = measure_round(url, args.streams, args.streams * args.requests_per_stream,
                          args.max_tokens)
        ttft = statistics.mean(x.ttft for x in r.done) if r.done else float("nan")
        out(f"{replicas} replica(s), {args.streams} streams x {args.requests_per_stream} "
            f"requests of up to {args.max_tokens} tokens: {r.tokens / r.wall:.1f} tokens/s, "
            f"mean time to first token {ttft * 1e3:.0f} ms, {len(r.errors)} failed")
        for error in r.errors[:5]:
            out(f"  {error}")
    serve.shutdown()

    tuning(out)
    ray.shutdown()
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--yirage", default="build/release/yirage")
    parser.add_argument("--model", required=True)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--requests-per-stream", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args()
    main()
