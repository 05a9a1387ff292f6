#!/usr/bin/env python3
"""The LLM engine on a GPU against HF transformers, in one run on one machine.

For each model: YiRage (`--backend cuda`; the block graphs tune::optimize chose) decode ms/token
at batch 1 (`yirage generate`, the decode rate it prints) and output tokens/s at batch 1-64
(`yirage serve` under that many concurrent greedy requests), and HF transformers on the same
weights, eager and with a static KV cache plus torch.compile, at the same batch sizes. Each time
is also given as a fraction of the HBM floor: the bytes of weights one decode step reads over the
copy bandwidth measured in the same run (a 1 GiB device-to-device copy).

Models: SmolLM2-135M (the Q4_1 GGUF of scripts/fetch-model.sh; HF peer only with --smollm2-hf),
a random-weight Llama-3-8B-shaped model in bf16 safetensors (written by
bench/make_llama_safetensors.py into --work, both engines read it), and a random-weight Q4_0 GGUF
of the same shape (bench/make_llama_gguf.py, or the file --llama-q4-0 names; YiRage only, HF
reads no Q4_0). --llama picks which of the two.

    python3 bench/gpu_llm_bench.py --yirage build/release/yirage --work /tmp/llm-bench \\
        --out bench/results/gpu_llm_h200.txt

Without a CUDA GPU it does its CPU-side steps (arguments, model files) and then fails with one
line saying why; --prepare-only stops after them (CI runs that with --llama-shape tiny).
Times are medians of --runs repetitions, with the range.
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_llama_gguf  # noqa: E402
import make_llama_safetensors  # noqa: E402

PROMPT = "Write a long story about a dragon who learns to cook. Once upon a time"
DEFAULT_SMOLLM2 = pathlib.Path.home() / ".cache/yirage/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--yirage", required=True, help="the yirage binary")
    ap.add_argument("--work", required=True, type=pathlib.Path,
                    help="directory for the generated model files")
    ap.add_argument("--smollm2", type=pathlib.Path, default=DEFAULT_SMOLLM2)
    ap.add_argument("--smollm2-hf", type=pathlib.Path,
                    help="SmolLM2-135M as a Hugging Face directory, for the HF peer; `random` "
                    "writes one of its shape with random bf16 weights into --work (the peer's "
                    "decode time depends on the shapes alone; its tokens mean nothing)")
    ap.add_argument("--llama-shape", choices=sorted(make_llama_safetensors.SHAPES),
                    default="llama3-8b")
    ap.add_argument("--llama", default="bf16,q4_0",
                    help="the Llama files to time: bf16 (safetensors), q4_0 (GGUF), or both")
    ap.add_argument("--llama-q4-0", type=pathlib.Path,
                    help="the Llama model as a Q4_0 GGUF (default: a random one in --work)")
    ap.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    ap.add_argument("--tokens", type=int, default=64, help="decode tokens per measurement")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kv-memory", type=int, default=4096, help="yirage serve's KV pool, MiB")
    ap.add_argument("--out", type=pathlib.Path)
    ap.add_argument("--prepare-only", action="store_true",
                    help="write the model files, print the plan and stop (no GPU needed)")
    args = ap.parse_args(argv)
    try:
        args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        ap.error(f"--batch-sizes {args.batch_sizes!r}: expected integers separated by commas")
    args.llama = [d for d in args.llama.split(",") if d]
    if any(d not in ("bf16", "q4_0") for d in args.llama):
        ap.error(f"--llama {','.join(args.llama)!r}: expected bf16, q4_0 or both")
    if not args.batch_sizes or min(args.batch_sizes) < 1 or max(args.batch_sizes) > 64:
        ap.error("--batch-sizes must be between 1 and 64")
    if args.tokens < 2 or args.runs < 1:
        ap.error("--tokens must be at least 2 and --runs at least 1")
    return args


class Model:
    def __init__(self, name, yirage_path, hf_dir, step_bytes):
        self.name, self.yirage_path, self.hf_dir, self.step_bytes = name, yirage_path, hf_dir, \
            step_bytes


def prepare(args):
    """The models to measure, with the bytes of weights one decode step reads."""
    shape = make_llama_safetensors.SHAPES[args.llama_shape]
    models = []
    if "bf16" in args.llama:
        llama_dir = args.work / f"{args.llama_shape}-bf16"
        if not (llama_dir / "model.safetensors").exists():
            make_llama_safetensors.make_model(args.llama_shape, llama_dir, "bf16")
        embedding = shape["vocab"] * shape["hidden"] * 2  # untied: one row of it is read a step
        models.append(Model(f"{args.llama_shape} bf16", llama_dir, llama_dir,
                             (llama_dir / "model.safetensors").stat().st_size - embedding))
    if "q4_0" in args.llama:
        gguf = args.llama_q4_0 or args.work / f"{args.llama_shape}-q4_0.gguf"
        if not gguf.exists():
            make_llama_gguf.make_model(args.llama_shape, gguf)
        embedding = shape["vocab"] * shape["hidden"] // 32 * 18
        models.append(Model(f"{args.llama_shape} Q4_0", gguf, None,
                            gguf.stat().st_size - embedding))
    if args.smollm2.exists():  # tied: the embedding is the LM head, read every step
        hf_dir = args.smollm2_hf
        if hf_dir is not None and str(hf_dir) == "random":
            hf_dir = args.work / "smollm2-135m-shape-bf16"
            if not (hf_dir / "model.safetensors").exists():
                make_llama_safetensors.make_model("smollm2-135m", hf_dir, "bf16")
        models.insert(0, Model("SmolLM2-135M Q4_1", args.smollm2, hf_dir,
                               args.smollm2.stat().st_size))
    return models


def gpu_or_reason(yirage):
    """Empty when torch and YiRage both see a CUDA GPU, else why not."""
    try:
        import torch
    except ImportError as e:
        return f"needs torch with CUDA ({e})"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    backends = json.loads(subprocess.run([yirage, "backends", "--json"], check=True,
                                         capture_output=True, text=True).stdout)
    cuda = [b for b in backends if b["name"] == "cuda"]
    if not cuda or not cuda[0]["available"]:
        return f"yirage's cuda backend is unavailable: {cuda[0].get('reason', '') if cuda else ''}"
    return ""


def copy_bandwidth():
    """Bytes/s of a 1 GiB device-to-device copy (read + write), median of 10."""
    import torch
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for _ in range(12):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * src.numel() / statistics.median(times[2:])


def summary(values):
    return statistics.median(values), min(values), max(values)


def yirage_batch1(args, model):
    """Decode ms/token from `yirage generate`'s decode rate, or the one-line reason it fails."""
    rates = []
    for _ in range(args.runs):
        r = subprocess.run([args.yirage, "generate", "--backend", "cuda", "--model",
                            str(model.yirage_path), "--prompt", PROMPT, "-n", str(args.tokens)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return None, r.stderr.strip().splitlines()[-1]
        m = re.search(r"decode: (\d+) tokens, ([\d.]+) tokens/s", r.stderr)
        rates.append(float(m.group(2)))
    return summary([1e3 / r for r in rates]), ""


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def yirage_batched(args, model):
    """Output tokens/s per batch size: that many concurrent greedy completions on yirage serve."""
    server = subprocess.Popen([args.yirage, "serve", "--backend", "cuda", "--model",
                               str(model.yirage_path), "--port", "0", "--max-batch", "64",
                               "--kv-memory", str(args.kv_memory)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        if not url.startswith("http"):
            return {}, (server.stderr.read().strip().splitlines() or ["no URL"])[-1]
        server.stdout.readline()  # "yirage serve: ready (...)"
        out = {}
        for bs in args.batch_sizes:
            rates = []
            for _ in range(args.runs):
                tokens = [0] * bs

                def one(i):
                    r = post(url + "/v1/completions", {"model": "m", "prompt": PROMPT,
                                                       "max_tokens": args.tokens,
                                                       "temperature": 0})
                    tokens[i] = r["usage"]["completion_tokens"]

                threads = [threading.Thread(target=one, args=(i,)) for i in range(bs)]
                start = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                rates.append(sum(tokens) / (time.perf_counter() - start))
            out[bs] = summary(rates)
        return out, ""
    finally:
        server.terminate()
        server.wait(timeout=60)


def hf_decode(args, hf_dir, compiled):
    """{bs: (ms per step, tokens/s)} for HF transformers, or the reason it cannot run."""
    import torch
    try:
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        return {}, f"transformers is not installed ({e})"
    model = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.bfloat16).cuda().eval()
    if compiled:
        # generate() compiles the forward itself when its cache is static (compile_config; mode
        # "reduce-overhead" captures CUDA graphs). A forward wrapped by hand instead failed on an
        # H100 (transformers 5): its CUDA graphs overwrote outputs that generate() still read.
        try:
            from transformers import CompileConfig
        except ImportError as e:
            return {}, f"this transformers has no CompileConfig ({e})"
        model.generation_config.cache_implementation = "static"
        model.generation_config.compile_config = CompileConfig(fullgraph=True,
                                                               mode="reduce-overhead")
    prompt = torch.randint(0, 256, (1, 32), device="cuda")

    def generate(ids, n):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    out = {}
    try:
        for bs in args.batch_sizes:
            ids = prompt.expand(bs, -1).contiguous()
            generate(ids, args.tokens)  # warm-up (and compilation)
            steps = []
            for _ in range(args.runs):
                # The decode steps alone: a run of n tokens less a run of 1 (prefill + 1 token).
                steps.append((generate(ids, args.tokens) - generate(ids, 1)) / (args.tokens - 1))
            ms = summary([s * 1e3 for s in steps])
            out[bs] = (ms, bs * 1e3 / ms[0])
    except Exception as e:  # torch.compile's failures are many; report, don't hide
        return out, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        del model
        torch.cuda.empty_cache()
    return out, ""


def fmt_range(s, unit=""):
    return f"{s[0]:.3f}{unit} ({s[1]:.3f}-{s[2]:.3f})"


def main(argv=None):
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if shutil.which(args.yirage) is None and not os.access(args.yirage, os.X_OK):
        sys.exit(f"gpu_llm_bench: {args.yirage} is not an executable")
    models = prepare(args)
    lines = [f"# {' '.join([sys.argv[0]] + (argv if argv is not None else sys.argv[1:]))}"]
    for m in models:
        lines.append(f"model {m.name}: {m.yirage_path}, {m.step_bytes / 2**30:.3f} GiB read a "
                     f"decode step, HF peer {'on ' + str(m.hf_dir) if m.hf_dir else 'none'}")
    lines.append(f"batch sizes {args.batch_sizes}, {args.tokens} decode tokens, {args.runs} runs")
    print("\n".join(lines), flush=True)
    if args.prepare_only:
        return 0
    why = gpu_or_reason(args.yirage)
    if why:
        print(f"gpu_llm_bench: needs a CUDA GPU: {why}", file=sys.stderr)
        return 2

    import torch
    bandwidth = copy_bandwidth()
    lines.append(f"device {torch.cuda.get_device_name()}, copy bandwidth {bandwidth / 1e12:.2f} TB/s")
    print(lines[-1], flush=True)
    for m in models:
        floor_ms = m.step_bytes / bandwidth * 1e3
        lines.append(f"\n## {m.name} (HBM floor {floor_ms:.3f} ms a decode step)")
        ours, why = yirage_batch1(args, m)
        lines.append("yirage bs1: " + (f"{fmt_range(ours, ' ms/token')}, "
                                        f"{floor_ms / ours[0]:.0%} of the floor" if ours
                                        else f"cannot run: {why}"))
        peers = {}
        if m.hf_dir:
            for label, compiled in (("hf eager", False), ("hf static+compile", True)):
                peers[label] = hf_decode(args, m.hf_dir, compiled)
        batched, why = yirage_batched(args, m) if ours else ({}, why)
        lines.append("| bs | yirage tok/s | " + " | ".join(f"{p} tok/s | {p} ms/step | ratio"
                                                         for p in peers) + " |")
        for bs in args.batch_sizes:
            row = [str(bs), fmt_range(batched[bs]) if bs in batched else "-"]
            for label, (result, _) in peers.items():
                if bs in result:
                    ms, rate = result[bs]
                    ratio = f"{batched[bs][0] / rate:.2f}x" if bs in batched else "-"
                    row += [f"{rate:.1f}", fmt_range(ms), ratio]
                else:
                    row += ["-", "-", "-"]
            lines.append("| " + " | ".join(row) + " |")
        if why:
            lines.append(f"yirage batched: cannot run: {why}")
        for label, (_, failure) in peers.items():
            if failure:
                lines.append(f"{label}: {failure}")
        print("\n".join(lines[-(len(args.batch_sizes) + 4):]), flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
