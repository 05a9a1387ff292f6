#!/usr/bin/env python3
"""`yirage serve` against llama.cpp's `llama-server` on the same GGUF and machine, in one run.

Each server runs alone (one after the other, never both at once), with the same thread count;
llama-server gets `-np N -cb` with N the largest concurrency and `-c` of `--context` positions per
slot, yirage `--max-batch N` and `--context` the same. Per concurrency N, N client streams share
N x `--requests-per-stream` streamed greedy completions of `--max-tokens` tokens, each request
pulling the next prompt. Every prompt is unique from its first token on, so neither server's
prefix or slot cache serves one request from another's work: what is measured is batching.

The client is this script's own asyncio client over aiohttp, on the same cores as the server (a
thread per stream, as the openai client needs, would cost those cores more at 64 streams).
Reported per concurrency and server: aggregate output tokens per second of the round's wall time
(tokens as the final usage chunk counts them), time to first token (request sent to the first
text chunk) and inter-token latency (gaps between successive text chunks) at p50 and p99, pooled
over the round's requests; the median and range of `--runs` runs, whose server order alternates;
and ours / peer of each median. Failed requests are counted and their messages printed.

llama-server builds from the llama.cpp tree in llama-cpp-python's PyPI sdist:
`bash scripts/build-llama-server.sh` (about 20 minutes on 2 cores) prints the binary's path.
Without `--llama-server` only yirage is measured and no ratio is given.

    python3 bench/serve_bench.py --yirage build/release/yirage \\
        --model "$(bash scripts/fetch-model.sh)" \\
        --llama-server /tmp/llama-build/build/bin/llama-server --out bench/results/serve_bench_epyc.txt
"""
import argparse
import asyncio
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import numpy as np

BUILD_HINT = "build it with scripts/build-llama-server.sh, which prints its path"

# Topics the prompts cycle through; each prompt starts with its own request number.
TOPICS = [
    "Write a long story about a dragon who learns to cook. Once upon a time",
    "Explain to a child how rain forms, step by step. First, the sun",
    "Here are the planets of the solar system, each with a short description: Mercury is",
    "A walk through a busy market in the morning. The first thing you notice is",
    "Advice for an adult who is learning to play the piano: the most important thing is",
    "The history of the bicycle began in the early nineteenth century, when",
    "Dear friend, life at the lighthouse has been quiet this winter, but yesterday",
    "Why is the sky blue? The short answer is that sunlight",
]


def prompt(index):
    return f"{index}. {TOPICS[index % len(TOPICS)]}"


# ---------------------------------------------------------------------------------------------
# Statistics

def percentile(values, q):
    """The q-th percentile (numpy's linear interpolation), or nan for no values."""
    return float(np.percentile(values, q)) if len(values) else float("nan")


def spread(values):
    """(median, min, max) of the finite values, or three nans where there are none."""
    finite = [v for v in values if np.isfinite(v)]
    if not finite:
        return (float("nan"),) * 3
    return float(np.median(finite)), min(finite), max(finite)


def ratio(ours, peer):
    return ours / peer if np.isfinite(ours) and np.isfinite(peer) and peer > 0 else float("nan")


# ---------------------------------------------------------------------------------------------
# The load

@dataclass
class Request:
    tokens: int
    ttft: float
    gaps: list


@dataclass
class Round:
    """One concurrency's requests against one server: what finished, what failed, the wall time."""
    streams: int
    wall: float = 0.0
    done: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    steps: dict = None  # yirage's step counters over the round (step_counters)

    @property
    def tokens(self):
        return sum(r.tokens for r in self.done)

    def metrics(self):
        ttfts = [r.ttft for r in self.done]
        gaps = [g for r in self.done for g in r.gaps]
        return {"tok/s": self.tokens / self.wall if self.wall > 0 else float("nan"),
                "TTFT p50": percentile(ttfts, 50) * 1e3, "TTFT p99": percentile(ttfts, 99) * 1e3,
                "ITL p50": percentile(gaps, 50) * 1e3, "ITL p99": percentile(gaps, 99) * 1e3}


class RequestFailed(Exception):
    pass


def parse_sse_line(raw):
    """The JSON event of one server-sent-events line, "DONE" for `data: [DONE]`, or None for a
    line that carries no data (blank lines, comments, other fields)."""
    line = raw.decode("utf-8", "replace").strip() if isinstance(raw, bytes) else raw.strip()
    if not line.startswith("data:"):
        return None
    data = line[len("data:"):].strip()
    if data == "[DONE]":
        return "DONE"
    try:
        return json.loads(data)
    except json.JSONDecodeError:
        raise RequestFailed(f"an event that is not JSON: {data[:120]!r}") from None


async def stream_completion(session, url, text, max_tokens):
    body = {"model": "m", "prompt": text, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    arrivals = []
    usage = None
    async with session.post(url + "/v1/completions", json=body) as response:
        if response.status != 200:
            detail = (await response.text())[:200].replace("\n", " ")
            raise RequestFailed(f"HTTP {response.status}: {detail}")
        async for raw in response.content:
            event = parse_sse_line(raw)
            if event is None:
                continue
            if event == "DONE":
                break
            if "error" in event:
                raise RequestFailed(f"error event: {json.dumps(event['error'])[:200]}")
            choices = event.get("choices") or []
            if choices and choices[0].get("text"):
                arrivals.append(time.perf_counter())
            if event.get("usage"):
                usage = event["usage"].get("completion_tokens")
        else:
            raise RequestFailed("the stream ended without data: [DONE]")
    if not arrivals:
        raise RequestFailed("no text chunk in the stream")
    if usage is None:
        raise RequestFailed("no usage chunk although stream_options.include_usage was set")
    return Request(tokens=usage, ttft=arrivals[0] - start,
                   gaps=[b - a for a, b in zip(arrivals, arrivals[1:])])


async def _round(url, streams, requests, max_tokens, first_prompt, timeout):
    import aiohttp

    result = Round(streams)
    next_index = iter(range(first_prompt, first_prompt + requests))

    async def worker(session):
        for index in next_index:  # one shared iterator: each stream takes the next prompt
            try:
                result.done.append(await stream_completion(session, url, prompt(index),
                                                           max_tokens))
            except (RequestFailed, aiohttp.ClientError, asyncio.TimeoutError) as e:
                result.errors.append(f"prompt {index}: {type(e).__name__}: {e}")

    # A connection per request: both servers may close a finished stream's connection, and a
    # pooled one reused after that fails to send the next request.
    connector = aiohttp.TCPConnector(limit=streams, force_close=True)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        start = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(streams)))
        result.wall = time.perf_counter() - start
    return result


def measure_round(url, streams, requests, max_tokens, first_prompt=0, timeout=600):
    """`requests` streamed greedy completions of `max_tokens` tokens by `streams` concurrent
    clients against the OpenAI-compatible server at `url`."""
    return asyncio.run(_round(url, streams, requests, max_tokens, first_prompt, timeout))


# ---------------------------------------------------------------------------------------------
# The servers

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process on loopback, logging to a file, ready once /health answers 200."""

    def __init__(self, name, command, port, log_dir):
        self.name, self.command, self.url = name, command, f"http://127.0.0.1:{port}"
        self.log_path = os.path.join(log_dir, f"{name}.log")

    def __enter__(self):
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._fail(f"exited with status {self.process.returncode} before /health")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass  # not listening yet, or 503 while loading the model
            time.sleep(0.1)
        self._fail("not ready after 300 s")

    def __exit__(self, *exc):
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()

    def _fail(self, why):
        self.__exit__()
        with open(self.log_path) as f:
            tail = f.read()[-2000:]
        sys.exit(f"serve_bench: {self.name} ({shlex.join(self.command)}) {why}; its log ends:\n"
                 f"{tail}")


def yirage_command(args, port):
    command = [args.yirage, "serve", "--model", args.model, "--host", "127.0.0.1", "--port",
               str(port), "--threads", str(args.threads), "--max-batch", str(max(args.streams)),
               "--context", str(args.context), "--backend", args.backend]
    if args.kv_memory is not None:
        command += ["--kv-memory", str(args.kv_memory)]
    return (command + (["--hand-written"] if args.hand_written else []) +
            (["--time-blocks"] if args.time_blocks else []))


def llama_command(args, port):
    slots = max(args.streams)
    return [args.llama_server, "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
            "-t", str(args.threads), "-tb", str(args.threads), "-np", str(slots), "-cb",
            "-c", str(args.context * slots)]


def version_of(command):
    try:
        p = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"
    lines = [line for line in (p.stdout + p.stderr).splitlines() if "version" in line.lower()]
    return lines[0].strip() if lines else "unknown"


def machine():
    model = "unknown CPU"
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown CPU":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{model} ({isa}), {os.cpu_count()} cores"


def load_average():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------------------------------------------------------------------------------------
# The benchmark

STEP_COUNTERS = ["yirage_steps_total", "yirage_step_seconds_total",
                 "yirage_forward_seconds_total", "yirage_decode_rows_total"]
BLOCK_PREFIXES = ('yirage_block_seconds_total{block="', 'yirage_block_launches_total{block="')


def step_counters(url):
    """yirage's step counters from its /metrics; None from a server without them."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    values = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name in STEP_COUNTERS:
            values[name] = float(value)
        elif name.startswith(BLOCK_PREFIXES):  # with --time-blocks: per block, by label
            values[name] = float(value)
    return values if all(c in values for c in STEP_COUNTERS) else None


def run_server(server, args):
    """Every concurrency's round on one started server; prompts never repeat within it."""
    measure_round(server.url, 1, 1, 4, first_prompt=10**6)  # warm-up: connections, first step
    rounds, first = {}, 0
    for n in args.streams:
        requests = n * args.requests_per_stream
        before = step_counters(server.url)
        rounds[n] = measure_round(server.url, n, requests, args.max_tokens, first_prompt=first,
                                  timeout=args.timeout)
        after = step_counters(server.url)
        if before and after:
            rounds[n].steps = {k: v - before.get(k, 0) for k, v in after.items()}
        first += requests
        r = rounds[n]
        print(f"  {server.name:<12} {n:>3} streams: {r.tokens / r.wall:7.1f} tok/s, "
              f"{len(r.done)} done, {len(r.errors)} failed", file=sys.stderr, flush=True)
    return rounds


METRICS = ["tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99"]


def report(results, args, out):
    """results: {server name: [ {streams: Round} per run ]}."""
    servers = list(results)
    head = f"{'streams':>7}  {'server':<12}" + "".join(
        f"  {m + (' ms' if m != 'tok/s' else ''):>21}" for m in METRICS)
    out(head + f"{'tok/req':>9}{'errors':>8}")
    medians = {}
    for n in args.streams:
        for name in servers:
            rounds = [run[n] for run in results[name]]
            cells = ""
            for m in METRICS:
                med, lo, hi = spread([r.metrics()[m] for r in rounds])
                medians[name, n, m] = med
                cells += f"  {f'{med:.1f} [{lo:.1f}-{hi:.1f}]':>21}"
            done = sum(len(r.done) for r in rounds)
            per_request = sum(r.tokens for r in rounds) / done if done else float("nan")
            errors = sum(len(r.errors) for r in rounds)
            out(f"{n:>7}  {name:<12}{cells}{per_request:>9.1f}{errors:>8}")
    out("")
    if len(servers) < 2:
        out("ratio ours / peer: absent (no --llama-server given; "
            f"{BUILD_HINT})")
    else:
        ours, peer = servers
        out("ratio ours / peer of the medians (tok/s: above 1 is ours faster; latencies: below 1 "
            "is ours quicker)")
        out(f"{'streams':>7}" + "".join(f"{m:>10}" for m in METRICS))
        for n in args.streams:
            out(f"{n:>7}" + "".join(f"{ratio(medians[ours, n, m], medians[peer, n, m]):>10.2f}"
                                    for m in METRICS))
    steps_report(results, args, out)
    for name in servers:
        messages = {}
        for run in results[name]:
            for n, r in run.items():
                for e in r.errors:
                    messages.setdefault(e, []).append(n)
        for e, where in list(messages.items())[:10]:
            out(f"error from {name} ({len(where)}x, at {sorted(set(where))} streams): {e}")


def steps_report(results, args, out):
    """Where yirage's step time went, from its own counters: the median over runs per concurrency
    of the mean step, the forward pass within it, and decode rows per step."""
    runs = results.get("yirage", [])
    if not runs or any(run[n].steps is None or run[n].steps["yirage_steps_total"] == 0
                       for run in runs for n in args.streams):
        return
    out("")
    out("yirage's steps over each round (its /metrics counters), median [min-max] of the runs")
    out(f"{'streams':>7} {'steps':>7} {'step ms':>25} {'forward ms':>25} {'decode rows/step':>17}")
    for n in args.streams:
        per = [run[n].steps for run in runs]
        steps = [p["yirage_steps_total"] for p in per]
        step_ms = [1e3 * p["yirage_step_seconds_total"] / c for p, c in zip(per, steps)]
        forward_ms = [1e3 * p["yirage_forward_seconds_total"] / c for p, c in zip(per, steps)]
        rows = [p["yirage_decode_rows_total"] / c for p, c in zip(per, steps)]
        cells = [f"{m:.2f} [{lo:.2f}-{hi:.2f}]" for m, lo, hi in
                 (spread(step_ms), spread(forward_ms))]
        out(f"{n:>7} {np.median(steps):>7.0f} {cells[0]:>25} {cells[1]:>25} "
            f"{np.median(rows):>17.1f}")
    blocks_report(runs, args, out)


def blocks_report(runs, args, out):
    """With --time-blocks: per concurrency, each block's ms per step (median of the runs), the
    most first, as the server's yirage_block_seconds_total counted them."""
    seconds_prefix = BLOCK_PREFIXES[0]
    names = sorted({k for run in runs for n in args.streams for k in run[n].steps
                    if k.startswith(seconds_prefix)})
    if not names:
        return
    for n in args.streams:
        per = [run[n].steps for run in runs]
        out("")
        out(f"yirage's blocks at {n} streams (--time-blocks: the backend waited for around each "
            "launch), median of the runs")
        out(f"{'ms/step':>9} {'launches/step':>14} {'ms/launch':>10}  block")
        rows = []
        for name in names:
            launches_name = BLOCK_PREFIXES[1] + name[len(seconds_prefix):]
            ms = np.median([1e3 * p.get(name, 0) / p["yirage_steps_total"] for p in per])
            launches = np.median([p.get(launches_name, 0) / p["yirage_steps_total"] for p in per])
            if launches > 0:
                rows.append((ms, launches, name[len(seconds_prefix):-2]))
        for ms, launches, block in sorted(rows, reverse=True):
            out(f"{ms:>9.2f} {launches:>14.1f} {ms / launches:>10.3f}  {block}")


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not positive")
    return value


def executable(text):
    if not (os.path.isfile(text) and os.access(text, os.X_OK)):
        raise argparse.ArgumentTypeError(f"{text}: no executable file there")
    return text


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"llama-server: {BUILD_HINT} (llama.cpp as llama-cpp-python's sdist vendors it).")
    parser.add_argument("--yirage", type=executable, default="build/release/yirage",
                        help="the yirage binary, built with the server (default %(default)s)")
    parser.add_argument("--model", required=True,
                        help="the GGUF file both servers load; without --llama-server also a "
                             "Hugging Face directory")
    parser.add_argument("--llama-server", type=executable, metavar="PATH",
                        help=f"llama.cpp's server binary; {BUILD_HINT}. Without it, yirage alone")
    parser.add_argument("--streams", type=positive_int, nargs="+", default=[1, 4, 16, 64],
                        help="concurrencies (default %(default)s)")
    parser.add_argument("--requests-per-stream", type=positive_int, default=4,
                        help="requests per concurrency are streams x this (default %(default)s)")
    parser.add_argument("--max-tokens", type=positive_int, default=48)
    parser.add_argument("--threads", type=positive_int, default=2,
                        help="each server's threads (default %(default)s)")
    parser.add_argument("--context", type=positive_int, default=256,
                        help="positions per stream: yirage --context, llama-server -c this x "
                             "slots (default %(default)s)")
    parser.add_argument("--runs", type=positive_int, default=3,
                        help="repeats of every measurement (default %(default)s)")
    parser.add_argument("--timeout", type=positive_int, default=600,
                        help="seconds one request may take before it counts as failed")
    parser.add_argument("--backend", default="cpu",
                        help="yirage serve's --backend (default %(default)s; cuda on a GPU)")
    parser.add_argument("--kv-memory", type=positive_int, metavar="MIB",
                        help="yirage serve's --kv-memory (default: the server's)")
    parser.add_argument("--hand-written", action="store_true",
                        help="yirage on its hand-written kernels instead of the fused graphs")
    parser.add_argument("--time-blocks", action="store_true",
                        help="yirage times each fused block (slower steps) and the report says "
                             "where a step's time went")
    parser.add_argument("--out", help="also write the report to this file")
    args = parser.parse_args(argv)
    if os.path.isdir(args.model):
        if args.llama_server:
            parser.error(f"--model {args.model} is a directory; llama-server reads GGUF files")
    elif not os.path.isfile(args.model):
        parser.error(f"--model {args.model}: no such file")
    if args.context <= 8 + args.max_tokens:
        parser.error(f"--context {args.context} leaves no room for a prompt and --max-tokens "
                     f"{args.max_tokens}")
    args.streams = sorted(set(args.streams))
    return args


def main(argv=None):
    args = parse_args(argv)
    lines = []

    def out(line=""):
        print(line, flush=True)
        lines.append(line)

    out(f"# {shlex.join(['python3'] + sys.argv)}")
    out(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}; load average at "
        f"start {load_average()}")
    out(f"# model {os.path.basename(os.path.normpath(args.model))}; {args.threads} threads each; streams "
        f"{args.streams}, {args.requests_per_stream} requests per stream, greedy, max_tokens "
        f"{args.max_tokens}; {args.runs} runs, median [min-max]")
    out(f"# ours: {shlex.join(yirage_command(args, 0)).replace('--port 0', '--port P')}")
    if args.llama_server:
        out(f"# peer: {shlex.join(llama_command(args, 0)).replace('--port 0', '--port P')}")
        out(f"#       {version_of([args.llama_server, '--version'])}")
    else:
        out("# peer: none (no --llama-server)")
    out("")

    names = ["yirage", "llama-server"] if args.llama_server else ["yirage"]
    commands = {"yirage": yirage_command, "llama-server": llama_command}
    results = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as logs:
        for run in range(args.runs):
            # The order alternates, so that drift in the machine's load hits both alike.
            for name in names if run % 2 == 0 else names[::-1]:
                port = free_port()
                print(f"run {run + 1}/{args.runs}: {name}", file=sys.stderr, flush=True)
                with Server(name, commands[name](args, port), port, logs) as server:
                    results[name].append(run_server(server, args))
    report(results, args, out)
    out(f"# load average at end {load_average()}")
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
