"""bench/serve_bench.py's parts that do not time anything: its arguments, its statistics, its SSE
client (against a small aiohttp server in the test that streams fixed events, some of them
broken, so that every failure is counted), the report without a peer, and one short run against
`yirage serve` alone. No assertion here is on a time."""
import asyncio
import json
import math
import os
import re
import subprocess
import sys
import threading

import pytest
from aiohttp import web

from llamacpp_support import model_path


@pytest.fixture(scope="module")
def sb(source_dir):
    sys.path.insert(0, str(source_dir / "bench"))
    import serve_bench
    return serve_bench


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")  # parse_args checks only that the file exists
    return str(path)


def test_defaults_are_the_issues_load(sb, yirage_bin, model_file):
    args = sb.parse_args(["--yirage", yirage_bin, "--model", model_file])
    assert args.streams == [1, 4, 16, 64]
    assert (args.max_tokens, args.threads, args.runs) == (48, 2, 3)
    assert args.llama_server is None
    assert sb.parse_args(["--yirage", yirage_bin, "--model", model_file,
                          "--streams", "16", "1", "16"]).streams == [1, 16]


def test_peer_commands_match_in_threads_slots_and_context(sb, yirage_bin, model_file):
    args = sb.parse_args(["--yirage", yirage_bin, "--model", model_file, "--llama-server",
                          yirage_bin, "--streams", "1", "8", "--threads", "3", "--context", "200"])
    llama = sb.llama_command(args, 1234)
    ours = sb.yirage_command(args, 1234)
    assert llama[llama.index("-np") + 1] == ours[ours.index("--max-batch") + 1] == "8"
    assert llama[llama.index("-t") + 1] == ours[ours.index("--threads") + 1] == "3"
    assert "-cb" in llama and llama[llama.index("-c") + 1] == str(200 * 8)


@pytest.mark.parametrize("argv, message", [
    (["--streams", "0"], "argument --streams: 0 is not positive"),
    (["--runs", "x"], "argument --runs: 'x' is not an integer"),
    (["--llama-server", "/no/such/llama-server"],
     "argument --llama-server: /no/such/llama-server: no executable file there"),
    (["--max-tokens", "300", "--context", "256"], "--context 256 leaves no room"),
])
def test_bad_arguments_end_with_one_line_naming_them(sb, yirage_bin, model_file, capsys,
                                                      argv, message):
    with pytest.raises(SystemExit) as exit_:
        sb.parse_args(["--yirage", yirage_bin, "--model", model_file] + argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_backend_and_kv_memory_reach_yirage_serve(sb, yirage_bin, model_file):
    ours = sb.yirage_command(sb.parse_args(["--yirage", yirage_bin, "--model", model_file]), 1)
    assert ours[ours.index("--backend") + 1] == "cpu" and "--kv-memory" not in ours
    args = sb.parse_args(["--yirage", yirage_bin, "--model", model_file, "--backend", "cuda",
                          "--kv-memory", "4096"])
    ours = sb.yirage_command(args, 1)
    assert ours[ours.index("--backend") + 1] == "cuda"
    assert ours[ours.index("--kv-memory") + 1] == "4096"


def test_a_model_directory_is_for_yirage_alone(sb, yirage_bin, tmp_path, capsys):
    assert sb.parse_args(["--yirage", yirage_bin, "--model", str(tmp_path)]).model == str(tmp_path)
    with pytest.raises(SystemExit):
        sb.parse_args(["--yirage", yirage_bin, "--model", str(tmp_path), "--llama-server",
                       yirage_bin])
    assert "is a directory; llama-server reads GGUF files" in capsys.readouterr().err


def test_missing_model_is_named(sb, yirage_bin, capsys):
    with pytest.raises(SystemExit):
        sb.parse_args(["--yirage", yirage_bin, "--model", "/no/model.gguf"])
    assert "--model /no/model.gguf: no such file" in capsys.readouterr().err


def test_help_says_how_to_build_llama_server(source_dir):
    out = subprocess.run([sys.executable, str(source_dir / "bench/serve_bench.py"), "--help"],
                         check=True, capture_output=True, text=True).stdout
    assert "scripts/build-llama-server.sh" in out


def test_statistics(sb):
    values = list(range(1, 101))
    assert sb.percentile(values, 50) == 50.5
    assert sb.percentile(values, 99) == pytest.approx(99.01)
    assert math.isnan(sb.percentile([], 50))
    assert sb.spread([3.0, float("nan"), 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert all(math.isnan(x) for x in sb.spread([float("nan")]))
    assert sb.ratio(300.0, 150.0) == 2.0
    assert math.isnan(sb.ratio(1.0, 0.0)) and math.isnan(sb.ratio(float("nan"), 1.0))


def test_sse_lines(sb):
    assert sb.parse_sse_line(b'data: {"a": 1}\n') == {"a": 1}
    assert sb.parse_sse_line(b"data: [DONE]\r\n") == "DONE"
    assert sb.parse_sse_line(b"\n") is None and sb.parse_sse_line(b": keep-alive\n") is None
    with pytest.raises(sb.RequestFailed, match="not JSON"):
        sb.parse_sse_line(b"data: {oops\n")


def chunk(text=None, usage=None):
    event = {"choices": [{"text": text, "index": 0}] if text is not None else []}
    if usage is not None:
        event["usage"] = {"completion_tokens": usage}
    return f"data: {json.dumps(event)}\n\n".encode()


async def completions(request):
    """Streams 3 text chunks and a usage chunk, or breaks the stream as the prompt's number asks:
    0 mod 5 answers 500, 1 mod 5 ends without [DONE], 2 mod 5 sends no usage."""
    body = await request.json()
    number = int(body["prompt"].split(".")[0])
    if number % 5 == 0:
        return web.json_response({"error": {"message": "overloaded"}}, status=500)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for piece in ("a", "", "b", "c"):  # an empty text chunk is no token
        await response.write(chunk(piece))
    await response.write(chunk(usage=None if number % 5 == 2 else 3))
    if number % 5 != 1:
        await response.write(b"data: [DONE]\n\n")
    return response


@pytest.fixture
def fixed_server():
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)


def test_client_counts_tokens_and_every_failure(sb, fixed_server):
    result = sb.measure_round(fixed_server, streams=4, requests=10, max_tokens=3, first_prompt=0)
    assert len(result.done) == 4 and len(result.errors) == 6  # prompts 3, 4, 8, 9 succeed
    assert result.tokens == 4 * 3
    assert all(len(r.gaps) == 2 for r in result.done)  # 3 text chunks, 2 gaps between them
    errors = "\n".join(result.errors)
    assert errors.count("HTTP 500") == 2 and "overloaded" in errors
    assert errors.count("without data: [DONE]") == 2
    assert errors.count("no usage chunk") == 2


def test_report_without_a_peer_says_the_ratio_is_absent(sb, yirage_bin, model_file):
    args = sb.parse_args(["--yirage", yirage_bin, "--model", model_file, "--streams", "1", "4"])
    runs = []
    for tokens in (10, 20, 30):
        run = {}
        for n in args.streams:
            run[n] = sb.Round(n, wall=1.0, done=[sb.Request(tokens, 0.1, [0.01])] * n,
                              errors=["HTTP 500: x"] if n == 4 else [],
                              steps={"yirage_steps_total": 10, "yirage_step_seconds_total":
                                     tokens / 1e3 * 1000, "yirage_forward_seconds_total": 10,
                                     "yirage_decode_rows_total": 10 * n})
        runs.append(run)
    lines = []
    sb.report({"yirage": runs}, args, lines.append)
    text = "\n".join(lines)
    assert "ratio ours / peer: absent" in text
    row = next(line for line in lines if line.split()[:2] == ["4", "yirage"])
    assert "80.0 [40.0-120.0]" in row and row.split()[-1] == "3"
    assert "error from yirage (3x, at [4] streams): HTTP 500: x" in text
    steps = text.split("yirage's steps over each round")[1].splitlines()[2:]
    # Wide cells (seconds a step, as a loaded sanitized build takes) stay apart.
    assert steps[1].split() == ["4", "10", "2000.00", "[1000.00-3000.00]", "1000.00",
                                "[1000.00-1000.00]", "4.0"]
    assert "yirage's blocks" not in text  # no --time-blocks counters


def test_block_times_report_each_blocks_ms_a_step_the_most_first(sb, yirage_bin, model_file):
    args = sb.parse_args(["--yirage", yirage_bin, "--model", model_file, "--streams", "2",
                          "--time-blocks"])
    assert "--time-blocks" in sb.yirage_command(args, 1)
    seconds, launches = sb.BLOCK_PREFIXES
    runs = []
    for scale in (1, 3):
        steps = {"yirage_steps_total": 10, "yirage_step_seconds_total": 1,
                 "yirage_forward_seconds_total": 0.5, "yirage_decode_rows_total": 20,
                 seconds + 'mlp, 4 rows"}': 0.2 * scale, launches + 'mlp, 4 rows"}': 300,
                 seconds + 'qkv, 4 rows"}': 0.5, launches + 'qkv, 4 rows"}': 300,
                 seconds + 'lm head"}': 0.0, launches + 'lm head"}': 0}
        runs.append({2: sb.Round(2, wall=1.0, done=[sb.Request(4, 0.1, [0.01])], errors=[],
                                 steps=steps)})
    lines = []
    sb.report({"yirage": runs}, args, lines.append)
    table = "\n".join(lines).split("yirage's blocks at 2 streams")[1].splitlines()[2:]
    # qkv 50 ms a step; mlp the median of 20 and 60; the lm head never launched, left out.
    assert [row.split() for row in table] == [["50.00", "30.0", "1.667", "qkv,", "4", "rows"],
                                              ["40.00", "30.0", "1.333", "mlp,", "4", "rows"]]


def test_a_short_run_against_yirage_alone(source_dir, yirage_bin, tmp_path):
    model = model_path()
    if not model.is_file():
        if os.environ.get("YIRAGE_REQUIRE_MODEL") == "1":
            pytest.fail(f"YIRAGE_REQUIRE_MODEL=1 but the model is missing at {model}")
        pytest.skip(f"the model is missing at {model} (run scripts/fetch-model.sh)")
    out = tmp_path / "report.txt"
    p = subprocess.run(
        [sys.executable, str(source_dir / "bench/serve_bench.py"), "--yirage", yirage_bin,
         "--model", str(model), "--streams", "1", "2", "--requests-per-stream", "1",
         "--max-tokens", "4", "--runs", "1", "--context", "64", "--hand-written", "--out",
         str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    report = out.read_text()
    assert "ratio ours / peer: absent" in report and "load average at start" in report
    rows = [line.split() for line in report.splitlines() if line[7:].split()[:1] == ["yirage"]]
    assert [r[:2] for r in rows] == [["1", "yirage"], ["2", "yirage"]]
    assert all(r[-1] == "0" for r in rows)  # no failed request
    # The server's own step counters: each request took at least 4 steps (one a token), the
    # forward pass fits in its step, and a stream had at most one decode row a step.
    assert "yirage's steps over each round" in report, report
    table = report.split("yirage's steps over each round")[1]
    steps = re.findall(r"^ +(\d+) +(\d+) +(\S+) \[\S+\] +(\S+) \[\S+\] +(\S+)$", table,
                       flags=re.M)
    assert [int(row[0]) for row in steps] == [1, 2], report
    for n, count, step_ms, forward_ms, rows_per_step in steps:
        assert int(count) >= 4, report
        assert 0 < float(forward_ms) <= float(step_ms), report
        assert 0 < float(rows_per_step) <= int(n), report
