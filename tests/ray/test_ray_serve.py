"""yirage.ray's Ray Serve deployment on a local Ray: two replicas of the test model answer the
official `openai` client with the tokens yr.LLM generates, errors keep `yirage serve`'s shape, and a
replica killed mid-stream is replaced while its in-flight request fails with a clear error."""
import json
import os
import signal
import time
import urllib.error
import urllib.request

import pytest

from ray_support import free_port, require

import yirage as yr

# Ray Serve's pydantic models warn when imported: Ray's warnings, not this suite's.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CONTEXT = 512
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def served(local_ray, model_path):
    """Two replicas of one thread each on the hand-written kernels (the fused blocks would make
    each replica's first load tune them, minutes on CI's two cores, and test_llm.py shows both
    give the same tokens)."""
    from ray import serve

    import yirage.ray

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(
        yirage.ray.deployment(model_path, num_replicas=2, threads=1, fused_blocks=False,
                              context_length=CONTEXT, kv_memory_mib=64,
                              health_check_period_s=1),
        name="yirage", route_prefix="/")
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()


@pytest.fixture(scope="module")
def reference(model_path):
    return yr.LLM(model_path, threads=1, context_length=CONTEXT, fused_blocks=False)


@pytest.fixture(scope="module")
def client(served):
    try:
        import openai
    except ImportError:
        require(False, "the openai package is not installed (pip install openai)",
                "YIRAGE_REQUIRE_RAY")
    return openai.OpenAI(base_url=served + "/v1", api_key="unused", max_retries=0, timeout=120)


def post(url, body, timeout=120):
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def replica_states(app="yirage"):
    from ray import serve

    return serve.status().applications[app].deployments["YirageServer"].replica_states


def test_completions_and_chat_equal_the_engine_through_the_openai_client(client, reference,
                                                                         model_path):
    completion = client.completions.create(model="smollm2", prompt=PROMPT, max_tokens=8,
                                           temperature=0)
    assert completion.choices[0].text == reference.generate(PROMPT, max_tokens=8)
    assert completion.usage.prompt_tokens == len(reference.tokenize(PROMPT))
    assert completion.model == "smollm2"

    chat = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=8, temperature=0)
    assert chat.choices[0].message.content == reference.generate(
        "What is the capital of France?", max_tokens=8, chat=True)

    pieces = [c.choices[0].text for c in client.completions.create(
        model="smollm2", prompt=PROMPT, max_tokens=8, temperature=0, stream=True)]
    assert "".join(pieces) == completion.choices[0].text

    (listed,) = client.models.list().data
    assert listed.id == os.path.basename(model_path)


def test_errors_have_the_servers_shape(served, client):
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="smollm2", prompt=PROMPT, max_tokens=-1)
    assert e.value.body["param"] == "max_tokens" and "between 1 and" in e.value.body["message"]
    status, _, text = post(served + "/v1/embeddings", {"input": "x"})
    assert status == 404
    assert json.loads(text)["error"]["message"] == "no route POST /v1/embeddings"


def replica_of(url, prompt):
    status, headers, text = post(url + "/v1/completions",
                                 {"prompt": prompt, "max_tokens": 1, "temperature": 0})
    assert status == 200, text
    return int(headers["X-Yirage-Replica"])


def test_prompts_with_a_shared_prefix_go_to_one_replica_and_others_spread(served):
    assert replica_states().get("RUNNING") == 2
    system = "You are a helpful assistant who answers in one short sentence. " * 5
    assert len({replica_of(served, system + f"Question {i}?") for i in range(6)}) == 1
    # Distinct beginnings hash to either replica: 16 all landing on one would have probability
    # 2^-15 under the rendezvous hash.
    assert len({replica_of(served, f"{i} is a number. " * 3) for i in range(16)}) == 2


def open_stream(url, prompt, max_tokens):
    request = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                         "stream": True}).encode(),
        headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(request, timeout=120)


def events_of(stream):
    return [line for line in stream.read().decode().splitlines() if line.startswith("data: ")]


def test_a_killed_replica_fails_its_request_clearly_and_is_replaced(served, reference):
    stream = open_stream(served, "Once upon a time", 400)
    victim = int(stream.headers["X-Yirage-Replica"])
    # A stream on the other replica, in flight while the victim dies: prefix routing is a
    # function of the prompt, so a prompt that went there once goes there again.
    other_prompt = next(p for p in (f"{i} is a number. " * 3 for i in range(64))
                        if replica_of(served, p) != victim)
    survivor = open_stream(served, other_prompt, 64)
    assert int(survivor.headers["X-Yirage-Replica"]) != victim
    assert stream.readline().startswith(b"data: {")
    assert survivor.readline().startswith(b"data: {")
    os.kill(victim, signal.SIGKILL)
    events = events_of(stream)
    assert events[-1] == "data: [DONE]"
    error = json.loads(events[-2][len("data: "):])["error"]
    assert error["type"] == "server_error"
    assert error["message"].startswith("the replica serving this request died before it finished")
    survived = events_of(survivor)
    assert survived[-1] == "data: [DONE]" and not any('"error"' in e for e in survived)

    # The other replica goes on serving at once.
    expected = reference.generate(PROMPT, max_tokens=8)
    status, headers, text = post(served + "/v1/completions",
                                 {"prompt": PROMPT, "max_tokens": 8, "temperature": 0})
    assert status == 200 and json.loads(text)["choices"][0]["text"] == expected

    # Ray Serve's health check finds the dead actor and starts a replica in its place; the
    # prompts of distinct beginnings reach both replicas again, neither of them the victim.
    deadline = time.monotonic() + 120
    while True:
        seen = {replica_of(served, f"{i} is a number. " * 3) for i in range(16)}
        if len(seen) == 2 and victim not in seen:
            break
        assert time.monotonic() < deadline, f"not replaced: {replica_states()}, {seen}"
        time.sleep(1)


def test_options_are_checked_before_ray_is_asked(ray_module, model_path):
    import yirage.ray

    with pytest.raises(yr.Error, match="unknown option 'replicas'"):
        yirage.ray.deployment(model_path, replicas=2)
    with pytest.raises(yr.Error, match="needs model=PATH"):
        yirage.ray.app({"num_replicas": "2"})
    assert yirage.ray.PrefixAffinityRouter.prefix_key(
        b'{"messages": [{"role": "user", "content": "Hi"}]}', 256) == "user:Hi\n"
    assert yirage.ray.PrefixAffinityRouter.prefix_key(b'{"prompt": "abcdef"}', 3) == "abc"
    assert yirage.ray.PrefixAffinityRouter.prefix_key(b"not json", 3) is None
