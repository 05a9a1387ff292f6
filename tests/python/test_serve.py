"""`yirage serve` driven by the official `openai` client: completions and chat, streamed and not,
greedy output equal to `yirage generate`'s, seeded sampling, stop strings, the 400 errors, the 429
of a full queue, a disconnect freeing its KV blocks, and the README's Serve example.

Needs the model (scripts/fetch-model.sh) and the `openai` package (scripts/install-deps.sh);
without them the tests skip, unless YIRAGE_REQUIRE_MODEL=1."""
import concurrent.futures
import json
import os
import re
import signal
import socket
import subprocess
import urllib.error
import urllib.request

import pytest

from llamacpp_support import model_path

CONTEXT = 512


def require(condition, reason):
    if condition:
        return
    if os.environ.get("YIRAGE_REQUIRE_MODEL") == "1":
        pytest.fail(f"YIRAGE_REQUIRE_MODEL=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def model():
    path = model_path()
    require(path.is_file(), f"the model is missing at {path} (run scripts/fetch-model.sh)")
    return str(path)


@pytest.fixture(scope="module")
def openai_module():
    try:
        import openai
    except ImportError:
        require(False, "the openai package is not installed (pip install openai)")
    return openai


class Served:
    """A `yirage serve` process on a port the system picked; stopped with SIGINT."""

    def __init__(self, yirage_bin, model, *extra):
        self.process = subprocess.Popen(
            [yirage_bin, "serve", "--model", model, "--port", "0", "--context", str(CONTEXT),
             "--kv-memory", "96", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.url = self.process.stdout.readline().strip()
        ready = self.process.stdout.readline()
        if not self.url.startswith("http://") or "ready" not in ready:
            self.process.kill()
            raise AssertionError(f"no readiness: {self.url!r} {ready!r} {self.process.stderr.read()}")

    def stop(self):
        self.process.send_signal(signal.SIGINT)
        out, err = self.process.communicate(timeout=60)
        return self.process.returncode, err

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return r.read().decode()

    def post(self, path, body):
        """(status, headers, text) of a POST with a raw body (str) or JSON (dict)."""
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                return r.status, r.headers, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read().decode()

    def metric(self, name):
        match = re.search(rf"^{name} (\S+)$", self.get("/metrics"), flags=re.M)
        assert match, name
        return float(match.group(1))


@pytest.fixture(scope="module")
def server(yirage_bin, model):
    served = Served(yirage_bin, model, "--max-batch", "16")
    yield served
    status, err = served.stop()
    assert status == 0, err


@pytest.fixture(scope="module")
def client(server, openai_module):
    return openai_module.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def generate(yirage_bin, model, prompt, tokens, *extra):
    result = subprocess.run(
        [yirage_bin, "generate", "--model", model, "--prompt", prompt, "-n", str(tokens),
         "--context", str(CONTEXT), *extra],
        capture_output=True, text=True, timeout=300, check=True)
    assert result.stdout.endswith("\n")
    return result.stdout[:-1]


PROMPT = "The capital of France is"


def test_health_and_models(server, client):
    assert json.loads(server.get("/health")) == {"status": "ok"}
    models = client.models.list()
    assert [m.id for m in models.data] == [os.path.basename(model_path())]


def test_many_clients_connecting_at_once_fit_in_the_listen_backlog(server):
    """cpp-httplib listens with a backlog of 5, which 64 clients connecting at once overflowed
    (some connections were reset); the server raises it to the system's limit. `ss` reads the
    backlog of a listening socket (its Send-Q)."""
    port = server.url.rsplit(":", 1)[1]
    result = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True,
                            check=True)
    fields = result.stdout.split()
    assert fields and fields[0] == "LISTEN", result.stdout
    with open("/proc/sys/net/core/somaxconn") as f:
        assert int(fields[2]) == int(f.read()), result.stdout


def test_greedy_completion_equals_generate_streamed_or_not(server, client, yirage_bin, model):
    want = generate(yirage_bin, model, PROMPT, 12)
    full = client.completions.create(model="m", prompt=PROMPT, max_tokens=12, temperature=0)
    assert full.choices[0].text == want
    assert full.usage.completion_tokens == 12 and full.choices[0].finish_reason == "length"
    chunks = list(client.completions.create(model="m", prompt=PROMPT, max_tokens=12,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want
    assert chunks[-1].usage.completion_tokens == 12 and chunks[-1].choices == []


def test_greedy_chat_equals_generate_chat_streamed_or_not(client, yirage_bin, model):
    question = "What is 2 + 2?"
    want = generate(yirage_bin, model, question, 16, "--chat")
    messages = [{"role": "user", "content": question}]
    full = client.chat.completions.create(model="m", messages=messages, max_tokens=16,
                                          temperature=0)
    assert full.choices[0].message.content == want
    assert full.choices[0].message.role == "assistant"
    stream = client.chat.completions.create(model="m", messages=messages, max_tokens=16,
                                            temperature=0, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream) == want


def test_sse_stream_ends_with_done(server):
    status, headers, text = server.post("/v1/completions", {
        "prompt": PROMPT, "max_tokens": 4, "temperature": 0, "stream": True})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = [line for line in text.split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-2][len("data: "):])["choices"][0]["finish_reason"] == "length"


def test_seed_repeats_and_stop_strings_cut(client):
    def sample(seed):
        return client.completions.create(model="m", prompt=PROMPT, max_tokens=10, temperature=0.9,
                                         seed=seed).choices[0].text
    assert sample(7) == sample(7)
    full = client.completions.create(model="m", prompt=PROMPT, max_tokens=12,
                                     temperature=0).choices[0].text
    stop = full.strip().split()[1]
    cut = client.completions.create(model="m", prompt=PROMPT, max_tokens=12, temperature=0,
                                    stop=[stop])
    assert cut.choices[0].text == full[:full.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_seeded_requests_draw_the_same_tokens_in_batches_of_1_3_and_16(server, client):
    prompts = [f"Tell me about the number {i}." for i in range(16)]

    def sample(i):
        return client.completions.create(model="m", prompt=prompts[i], max_tokens=4,
                                         temperature=0.9, seed=1000 + i).choices[0].text

    alone = [sample(i) for i in range(16)]
    for size in (3, 16):
        steps = server.metric("yirage_steps_total")
        tokens = server.metric("yirage_generated_tokens_total")
        with concurrent.futures.ThreadPoolExecutor(size) as pool:
            assert list(pool.map(sample, range(size))) == alone[:size], size
        # Fewer steps than tokens: the requests did share steps.
        assert server.metric("yirage_steps_total") - steps < \
            server.metric("yirage_generated_tokens_total") - tokens
    assert len(set(alone)) > 1


def test_logprobs_in_chat_and_completions(client):
    chat = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}],
                                          max_tokens=6, temperature=0, logprobs=True,
                                          top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens
    assert "".join(t.token for t in content) == chat.choices[0].message.content
    for t in content:  # greedy: each token is its step's most likely one
        assert t.logprob <= 0 and len(t.top_logprobs) == 2
        assert t.top_logprobs[0].token == t.token and t.top_logprobs[0].logprob == t.logprob
    chunks = list(client.completions.create(model="m", prompt=PROMPT, max_tokens=5,
                                            temperature=0, logprobs=1, stream=True))
    tokens = [tok for c in chunks if c.choices and c.choices[0].logprobs
              for tok in c.choices[0].logprobs.tokens]
    assert "".join(tokens) == "".join(c.choices[0].text for c in chunks if c.choices)
    assert len(tokens) == 5


@pytest.mark.parametrize("body,param", [
    ('{"prompt": "x", ', None),
    ({"prompt": "x", "temperature": "hot"}, "temperature"),
    ({"prompt": "x", "top_p": 2}, "top_p"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "stop": [1]}, "stop"),
    ({"prompt": "x", "n": 2}, "n"),
    ({"prompt": "x", "logprobs": 9}, "logprobs"),
    ({"prompt": "x", "stream": "yes"}, "stream"),
    ({"prompt": " ".join(["word"] * (CONTEXT + 10))}, "prompt"),
    ({"temperature": 0}, "prompt"),
])
def test_bad_requests_get_400_naming_the_field(server, body, param):
    status, _, text = server.post("/v1/completions", body)
    assert status == 400, text
    error = json.loads(text)["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    assert error["param"] == param


def test_chat_400_through_the_client(client, openai_module):
    with pytest.raises(openai_module.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=[{"role": "robot", "content": "x"}])
    assert e.value.body["param"] == "messages"


def test_full_queue_answers_429_and_disconnects_free_blocks(yirage_bin, model):
    served = Served(yirage_bin, model, "--max-batch", "1", "--max-queue", "1")
    try:
        body = json.dumps({"prompt": PROMPT, "max_tokens": CONTEXT, "temperature": 0,
                           "stream": True}).encode()
        def open_stream():
            request = urllib.request.Request(served.url + "/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"})
            return urllib.request.urlopen(request, timeout=60)

        # One runs (its first token has come), one waits for the batch slot: the queue is full.
        streams = [open_stream()]
        while not streams[0].readline().startswith(b"data: "):
            pass  # ": waiting" comments come until the first token
        streams.append(open_stream())
        while served.metric("yirage_queue_depth") < 1:
            pass
        status, headers, text = served.post("/v1/completions", {"prompt": PROMPT})
        assert status == 429 and headers["Retry-After"] == "1", text
        assert json.loads(text)["error"]["message"]
        assert served.metric("yirage_kv_blocks_used") > 0
        for s in streams:
            s.close()
        # The disconnected streams' sequences end and their blocks return to the pool.
        while served.metric("yirage_running_sequences") or served.metric("yirage_queue_depth"):
            pass
        assert served.metric("yirage_kv_blocks_used") == 0
        assert served.metric("yirage_requests_cancelled_total") == 2
        assert served.metric("yirage_requests_rejected_busy_total") == 1
    finally:
        status, err = served.stop()
    assert status == 0, err
    assert "SIGINT: shutting down" in err


def test_a_repeated_prompt_prefix_comes_from_the_cache(server, client):
    system = "You are a helpful assistant who answers in one short sentence. " * 3
    answers = []
    for question in ("Name a color.", "Name a color.", "Name a fruit."):
        hits = server.metric("yirage_prefix_cache_hit_blocks_total")
        messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        answers.append(client.chat.completions.create(model="m", messages=messages, max_tokens=8,
                                                      temperature=0).choices[0].message.content)
        if len(answers) > 1:  # the system prompt's blocks are shared from the second request on
            assert server.metric("yirage_prefix_cache_hit_blocks_total") >= hits + 2
    assert answers[0] == answers[1]
    assert 0 < server.metric("yirage_prefix_cache_hit_rate") <= 1


def test_metrics_are_prometheus_text(server, client):
    client.completions.create(model="m", prompt=PROMPT, max_tokens=3, temperature=0)
    text = server.get("/metrics")
    for name in ("yirage_queue_depth", "yirage_running_sequences", "yirage_kv_blocks_used",
                 "yirage_kv_blocks_free", "yirage_kv_blocks_cached",
                 "yirage_prefix_cache_hit_rate", "yirage_generated_tokens_total"):
        assert re.search(rf"^# TYPE {name} (gauge|counter)$", text, flags=re.M), name
    assert re.search(r'^yirage_time_to_first_token_seconds_bucket\{le="\+Inf"\} [1-9]', text,
                     flags=re.M)
    assert re.search(r"^yirage_inter_token_latency_seconds_count [1-9]", text, flags=re.M)
    assert "yirage_block_seconds_total" not in text  # only with --time-blocks


def test_time_blocks_counts_each_blocks_launches_and_seconds(yirage_bin, model):
    served = Served(yirage_bin, model, "--max-batch", "4", "--time-blocks")
    try:
        status, _, body = served.post("/v1/completions", {"model": "m", "prompt": PROMPT,
                                                          "max_tokens": 3, "temperature": 0})
        assert status == 200, body
        text = served.get("/metrics")
    finally:
        code, err = served.stop()
    assert code == 0, err
    seconds = dict(re.findall(r'^yirage_block_seconds_total\{block="([^"]+)"\} (\S+)$', text,
                              flags=re.M))
    launches = dict(re.findall(r'^yirage_block_launches_total\{block="([^"]+)"\} (\S+)$', text,
                               flags=re.M))
    assert set(seconds) == set(launches) and "rmsnorm+qkv, 1 rows" in seconds, text
    layers = 30  # SmolLM2-135M
    for block, count in launches.items():
        assert float(seconds[block]) > 0, block
        if not block.startswith("final norm"):  # every layer launches the others once a step
            assert int(count) % layers == 0 and int(count) > 0, (block, count)
    # Two decode steps after the prompt's step, one row each.
    assert int(launches["rmsnorm+qkv, 1 rows"]) >= 2 * layers


@pytest.mark.parametrize("path", [[], ["--hand-written"]], ids=["searched", "hand-written"])
def test_generate_time_blocks_prints_where_the_time_went(yirage_bin, model, path):
    result = subprocess.run(
        [yirage_bin, "generate", "--model", model, "--prompt", PROMPT, "-n", "4", "--context",
         str(CONTEXT), "--time-blocks", *path], capture_output=True, text=True, timeout=300,
        check=True)
    table = result.stderr.split("block times (", 1)[1].splitlines()
    assert table[1].split() == ["ms", "launches", "ms/launch", "share", "block"]
    rows = [line.split(None, 4) for line in table[2:]]
    blocks = {row[4]: int(row[1]) for row in rows}
    assert blocks["rmsnorm+qkv, 1 rows"] % 30 == 0 and blocks["final norm + lm head"] == 4
    assert abs(sum(float(row[3].rstrip("%")) for row in rows) - 100) < 0.5


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_readme_serve_example_runs(source_dir, model):
    readme = (source_dir / "README.md").read_text()
    section = readme.split("## Serve\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    commands = block.replace("\\\n", "").strip().splitlines()
    assert commands[0].startswith("yirage serve ") and commands[1].startswith("curl ")
    port = str(free_port())
    yirage_dir = os.path.dirname(os.environ["YIRAGE_BIN"])
    env = dict(os.environ, PATH=yirage_dir + os.pathsep + os.environ["PATH"],
               YIRAGE_MODEL_PATH=model)
    serve = subprocess.Popen(["bash", "-c", "exec " + commands[0].replace("8080", port)],
                             cwd=source_dir, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert serve.stdout.readline().strip() == f"http://127.0.0.1:{port}"
        assert "ready" in serve.stdout.readline()
        reply = subprocess.run(["bash", "-c", commands[1].replace("8080", port)], cwd=source_dir,
                               env=env, capture_output=True, text=True, timeout=120, check=True)
        assert json.loads(reply.stdout)["choices"][0]["text"]
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=60)
    assert serve.returncode == 0


def test_an_unknown_or_unavailable_backend_is_refused_with_one_line(yirage_bin, model):
    """--backend picks where the block graphs run; one that cannot run exits before listening."""
    backends = json.loads(subprocess.run([yirage_bin, "backends", "--json"], check=True,
                                         capture_output=True, text=True).stdout)
    names = ["nope"] + [b["name"] for b in backends if not b["available"]]
    for name in names:
        run = subprocess.run([yirage_bin, "serve", "--model", model, "--port", "0", "--backend",
                              name], capture_output=True, text=True, timeout=120)
        assert run.returncode == 1 and run.stdout == "", (name, run.stdout, run.stderr)
        assert run.stderr.count("\n") == 1 and run.stderr.startswith("yirage: error: "), run.stderr
        assert f"backend '{name}'" in run.stderr
