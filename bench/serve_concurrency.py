#!/usr/bin/env python3
"""Aggregate output throughput of `yirage serve` at several numbers of concurrent streams.

Starts the server on a free port, then for each concurrency N runs N client threads, each sending
`--requests-per-stream` greedy streamed completions of up to `--max-tokens` tokens through the
official `openai` client, and prints the output tokens (as the usage chunks count them) per second
of the round's wall time, with the mean time to first token. No peer here: this is the quick look
at whether batching pays, not the benchmark against llama.cpp's server.

    python3 bench/serve_concurrency.py --yirage build/release/yirage \
        --model "$(bash scripts/fetch-model.sh)" --streams 1 4 16
"""
import argparse
import statistics
import subprocess
import sys
import threading
import time

import openai

PROMPT = "Write a long story about a dragon who learns to cook. Once upon a time"


def stream_once(client, max_tokens):
    start = time.perf_counter()
    first = None
    tokens = 0
    for chunk in client.completions.create(model="m", prompt=PROMPT, max_tokens=max_tokens,
                                           temperature=0, stream=True,
                                           stream_options={"include_usage": True}):
        if chunk.choices and chunk.choices[0].text and first is None:
            first = time.perf_counter() - start
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
    return tokens, first


def round_of(client, streams, max_tokens, requests_per_stream):
    results = []
    lock = threading.Lock()

    def worker():
        for _ in range(requests_per_stream):
            r = stream_once(client, max_tokens)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=worker) for _ in range(streams)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    tokens = sum(r[0] for r in results)
    ttft = statistics.mean(r[1] for r in results if r[1] is not None)
    return tokens, wall, ttft


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--yirage", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--requests-per-stream", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hand-written", action="store_true",
                        help="serve on the hand-written kernels instead of the fused graphs")
    args = parser.parse_args()
    command = [args.yirage, "serve", "--model", args.model, "--port", "0", "--threads",
               str(args.threads), "--max-batch", str(max(args.streams)), "--context", "1024"]
    if args.hand_written:
        command.append("--hand-written")
    print("$", " ".join(command), file=sys.stderr)
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        print(server.stdout.readline().strip(), file=sys.stderr)
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        stream_once(client, 4)  # warm-up
        print(f"{'streams':>7} {'tokens':>7} {'seconds':>8} {'tok/s':>7} {'mean TTFT s':>11}")
        for n in args.streams:
            tokens, wall, ttft = round_of(client, n, args.max_tokens, args.requests_per_stream)
            print(f"{n:>7} {tokens:>7} {wall:>8.2f} {tokens / wall:>7.1f} {ttft:>11.3f}")
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
