#!/usr/bin/env python3
"""YiRage's LLM engine against llama.cpp (llama-cpp-python) on the same GGUF, in the same run.

Measures, with the same thread count for both:
  - prefill: tokens/s for a prompt of --prompt-tokens tokens (one batch);
  - decode: tokens/s for --decode-tokens greedy steps after a short prompt.
Ours runs twice per round: as shipped, the hot blocks as superoptimized kernel graphs on the cpu
backend ("yirage"), and with --hand-written, the engine's hand-written kernels. Each runs --runs
times, alternating, after a warm-up that also fills the tuning cache; each row prints the median
and the range of its runs, and the ratios are of medians (the load average is printed: a value
above the core count means other work shared the machine). A last line compares the searched
blocks with the hand-written ones, the figure issue 35 asks to be at least 1.0x.

--block-runs N then decodes N more times per path with `--time-blocks` (the blocks timed one by
one, outside the timed runs above) and prints each block's ms a launch on both paths, median and
range, with their ratio: where the two paths' decode differs.

  python3 bench/llm_vs_llamacpp.py --yirage build/release/yirage [--threads 2] [--block-runs 5]
      [--out FILE]

--requantize q4_0 first converts the model with llama.cpp's own quantizer (the embedding stays
Q8_0) into a temporary file, and both engines run that: the Q4_0 kernels against llama.cpp's.
"""

import argparse
import ctypes
import json
import os
import pathlib
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DECODE_PROMPT = "The capital of France is"
LONG_TEXT = (
    "The history of computing is a story of people finding faster ways to do arithmetic. "
    "Mechanical calculators gave way to relays, relays to vacuum tubes, and tubes to transistors, "
    "each step making machines smaller, cheaper and more reliable. Compilers let programmers "
    "write in languages closer to mathematics, operating systems shared one machine among many "
    "users, and networks joined machines together. Today a single chip holds billions of "
    "transistors, and the same questions remain: how to move data less, compute more, and keep "
    "every unit busy. Superoptimizers search the space of programs for the fastest equivalent "
    "one, and inference engines run language models on ordinary processors. "
) * 4


def model_path(arg):
    if arg:
        return pathlib.Path(arg)
    if os.environ.get("YIRAGE_MODEL_PATH"):
        return pathlib.Path(os.environ["YIRAGE_MODEL_PATH"])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(cache) / "yirage" / "models" / MODEL_NAME


def requantized(llama_cpp, model, ftype_name, directory):
    """`model` converted by llama.cpp's quantizer to LLAMA_FTYPE_MOSTLY_<ftype_name>."""
    path = pathlib.Path(directory) / f"{model.stem}.{ftype_name}.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype_name.upper()}")
    params.allow_requantize = True
    params.token_embedding_type = params.output_tensor_type = llama_cpp.GGML_TYPE_Q8_0
    if llama_cpp.llama_model_quantize(str(model).encode(), str(path).encode(),
                                      ctypes.byref(params)) != 0:
        sys.exit(f"llama.cpp could not requantize {model} to {ftype_name}")
    return path


def run_ours(binary, model, prompt, n, threads, hand_written=False, time_blocks=False):
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "r.json"
        p = subprocess.run([binary, "generate", "--model", str(model), "--prompt", prompt, "-n",
                            str(n), "--temperature", "0", "--threads", str(threads), "--context",
                            "1024", "--save-json", str(out)]
                           + (["--hand-written"] if hand_written else [])
                           + (["--time-blocks"] if time_blocks else []),
                           check=True, capture_output=True, text=True)
        r = json.loads(out.read_text())
    r["hot_blocks"] = next((line for line in p.stderr.splitlines()
                            if line.startswith("hot blocks:")), "hot blocks: ?")
    if time_blocks:
        r["blocks"] = block_times(p.stderr)
    return r


def block_times(stderr):
    """{block: ms a launch} from the table `yirage generate --time-blocks` prints."""
    if "block times (" not in stderr:
        sys.exit(f"yirage generate --time-blocks printed no block table:\n{stderr[-2000:]}")
    table = stderr.split("block times (", 1)[1].splitlines()[2:]
    times = {}
    for line in table:
        cells = line.split(None, 4)
        if len(cells) == 5 and cells[3].endswith("%"):
            times[cells[4]] = float(cells[2])
    return times


def blocks_report(say, per_path):
    """Each block's ms a launch, searched against hand-written (median [range] of the runs)."""
    median = statistics.median
    names = sorted({b for runs in per_path.values() for run in runs for b in run})
    say("")
    say("blocks at decode, ms a launch (--time-blocks: each block timed alone), median [range]")
    say(f"{'searched':>24} {'hand-written':>24} {'ratio':>6}  block")

    def cell(values):
        return f"{median(values):.4f} [{min(values):.4f}-{max(values):.4f}]" if values else "-"

    for name in names:
        ours = [run[name] for run in per_path["searched"] if name in run]
        hand = [run[name] for run in per_path["hand-written"] if name in run]
        ratio = f"{median(ours) / median(hand):6.2f}" if ours and hand else f"{'-':>6}"
        say(f"{cell(ours):>24} {cell(hand):>24} {ratio}  {name}")


def llama_prefill(engine, ids):
    engine.reset()
    t0 = time.perf_counter()
    engine.eval(ids)
    return len(ids) / (time.perf_counter() - t0)


def llama_decode(engine, prompt_ids, n):
    engine.reset()
    engine.eval(prompt_ids)
    token = int(np.argmax(engine.scores[engine.n_tokens - 1]))
    t0 = time.perf_counter()
    for _ in range(n - 1):  # as ours: the first token comes from the prefill
        engine.eval([token])
        token = int(np.argmax(engine.scores[engine.n_tokens - 1]))
    return (n - 1) / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--yirage", default="build/release/yirage")
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--block-runs", type=int, default=0,
                    help="decodes per path with --time-blocks afterwards (0: none)")
    ap.add_argument("--out")
    ap.add_argument("--requantize", choices=["q4_0"])
    args = ap.parse_args()

    import llama_cpp

    model = source = model_path(args.model)
    workdir = tempfile.TemporaryDirectory()
    if args.requantize:
        model = requantized(llama_cpp, source, args.requantize, workdir.name)
    engine = llama_cpp.Llama(model_path=str(model), n_ctx=1024, n_batch=512,
                             n_threads=args.threads, n_threads_batch=args.threads, verbose=False)
    # A prompt of exactly --prompt-tokens tokens for both engines.
    ids = engine.tokenize(LONG_TEXT.encode(), add_bos=True, special=False)[: args.prompt_tokens]
    prompt = engine.detokenize(ids).decode()
    ids = engine.tokenize(prompt.encode(), add_bos=True, special=False)
    decode_ids = engine.tokenize(DECODE_PROMPT.encode(), add_bos=True, special=False)

    lines = []

    def say(text):
        print(text, flush=True)
        lines.append(text)

    say("$ python3 " + " ".join(shlex.quote(a) for a in sys.argv))
    say(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; host: {platform.node()}; "
        f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} logical cores")
    say(f"load average before: {os.getloadavg()[0]:.2f} (a value above the core count means "
        f"other work shared the machine during the run)")
    say(f"model: {model}" + (f" (requantized from {source} by llama.cpp)" if args.requantize else "")
        + f"; threads: {args.threads}; llama-cpp-python {llama_cpp.__version__}")
    say(f"prefill prompt: {len(ids)} tokens; decode: {args.decode_tokens} tokens after a "
        f"{len(decode_ids)}-token prompt; median and range of {args.runs} runs each, alternating")

    # Warm-up: page the model in for both, and optimize (or load from the tuning cache) our
    # fused block graphs, so that no timed run includes the one-time search.
    say(run_ours(args.yirage, model, DECODE_PROMPT, 4, args.threads)["hot_blocks"])
    run_ours(args.yirage, model, DECODE_PROMPT, 4, args.threads, hand_written=True)
    llama_decode(engine, decode_ids, 4)

    # yirage: the superoptimized block graphs (the default); hand: the hand-written kernels.
    runs = {k: [] for k in ("yirage_pf", "yirage_dec", "hand_pf", "hand_dec", "llama_pf",
                            "llama_dec")}
    for _ in range(args.runs):
        for name, hand in (("yirage", False), ("hand", True)):
            r = run_ours(args.yirage, model, prompt, 1, args.threads, hand)
            assert len(r["prompt_ids"]) == len(ids), (len(r["prompt_ids"]), len(ids))
            runs[name + "_pf"].append(r["prefill_tokens_per_second"])
            r = run_ours(args.yirage, model, DECODE_PROMPT, args.decode_tokens, args.threads, hand)
            runs[name + "_dec"].append(r["decode_tokens_per_second"])
        runs["llama_pf"].append(llama_prefill(engine, ids))
        runs["llama_dec"].append(llama_decode(engine, decode_ids, args.decode_tokens))

    median = statistics.median

    def row(name, engine_name, ours, theirs):
        say(f"{name:<8} {engine_name:<14} {median(ours):8.1f} tok/s ({min(ours):.0f}-{max(ours):.0f})"
            f"   llama.cpp {median(theirs):8.1f} tok/s ({min(theirs):.0f}-{max(theirs):.0f})"
            f"   ratio {median(ours) / median(theirs):5.2f}x")

    for phase, key in (("prefill", "pf"), ("decode", "dec")):
        row(phase, "yirage", runs["yirage_" + key], runs["llama_" + key])
        row(phase, "hand-written", runs["hand_" + key], runs["llama_" + key])
    say("searched blocks / hand-written kernels (medians): " + ", ".join(
        f"{phase} {median(runs['yirage_' + key]) / median(runs['hand_' + key]):.2f}x"
        for phase, key in (("prefill", "pf"), ("decode", "dec"))))
    if args.block_runs > 0:
        per_path = {"searched": [], "hand-written": []}
        for _ in range(args.block_runs):
            for path, hand in (("searched", False), ("hand-written", True)):
                per_path[path].append(run_ours(args.yirage, model, DECODE_PROMPT,
                                               args.decode_tokens, args.threads, hand,
                                               time_blocks=True)["blocks"])
        blocks_report(say, per_path)
    say(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.out:
        pathlib.Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
