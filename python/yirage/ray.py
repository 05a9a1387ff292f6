"""YiRage on Ray: serving replicas behind Ray Serve, and tuning graphs across a Ray cluster.

Serving: each replica of the ``YirageServer`` deployment loads the model into its own process
with ``yirage serve``'s server (the C++ serve stage, bound as ``yirage._Server``) listening on a
loopback port, and forwards to it the requests that the ``OpenAIIngress`` deployment hands it
through a deployment handle (routed by ``PrefixAffinityRouter``). The application therefore speaks
exactly the API of ``yirage serve`` (/v1/completions, /v1/chat/completions, /v1/models, /health,
/metrics), with its continuous batching, and Ray Serve adds the replicas, their placement, the
autoscaling and the replacement of a replica that dies; the ingress ends a request whose replica
died with an OpenAI error object. docs/ray.md has the design::

    serve run yirage.ray:app model=/path/to/model.gguf num_replicas=2

Tuning: :func:`tune_graphs` runs ``KernelGraph.superoptimize`` (the one tuning pipeline, tune/)
for each graph in a Ray task of its own, each with a tuning cache of its own on the worker, and
copies each winner's cache entry back into the caller's tuning cache. An entry is keyed by the
worker's device fingerprint, so a cluster of unlike machines gives one entry per device.

Needs the ``ray`` extra: ``pip install "yirage[ray]"``.
"""

import hashlib
import json
import os
import random
import sqlite3
import tempfile
import threading
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

import ray
from ray import serve
from ray.serve.request_router import RequestRouter

import yirage as yr

# The paths a replica answers; anything else gets the OpenAI-shaped 404 below.
_ROUTES = {
    ("GET", "/health"),
    ("GET", "/metrics"),
    ("GET", "/v1/models"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions"),
}


def _error_body(message: str, error_type: str = "invalid_request_error") -> bytes:
    """The error object `yirage serve` answers with (serve/openai_api.cpp, ApiError::body)."""
    return json.dumps(
        {"error": {"message": message, "type": error_type, "param": None, "code": None}}
    ).encode()


class YirageServer:
    """One engine replica: the model in this process behind `yirage serve`'s server.

    The keyword arguments are those of ``yirage serve`` (threads, context_length, kv_memory_mib,
    max_batch, max_queue, fused_blocks, backend). Ray Serve's options (num_replicas,
    autoscaling_config, ray_actor_options, ...) come from the deployment, not from here.
    """

    def __init__(self, model: str, **options: Any) -> None:
        if not hasattr(yr._yirage, "_Server"):
            raise yr.Error(
                "yirage.ray: this build of yirage has no HTTP server (configured with "
                "-DYIRAGE_SERVER=OFF; install libcpp-httplib-dev and rebuild)"
            )
        self._server = yr._yirage._Server(model, **options)
        self._server.bind()
        self._url = self._server.url
        self._thread = threading.Thread(target=self._server.run, name="yirage-serve", daemon=True)
        self._thread.start()
        self._session = None

    async def _client(self):
        import aiohttp

        if self._session is None:
            # No total timeout: a long generation streams for as long as it takes; the server's
            # own socket timeouts bound a stalled connection.
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)
            )
        return self._session

    async def handle(self, method: str, path: str, body: bytes):
        """Streams the server's answer to one request: first a head (status, media type,
        headers), then the body's bytes as they come."""
        session = await self._client()
        async with session.request(
            method,
            self._url + path,
            data=body if method == "POST" else None,
            headers={"Content-Type": "application/json"},
        ) as upstream:
            headers = {k: v for k, v in upstream.headers.items() if k == "Retry-After"}
            # Which replica answered: its process id, for logs (and the tests that kill it).
            headers["X-Yirage-Replica"] = str(os.getpid())
            media_type = upstream.headers.get("Content-Type", "application/json").split(";")[0]
            yield {"status": upstream.status, "media_type": media_type, "headers": headers}
            # Leaving early (the caller went away) closes the connection to the server, which
            # cancels the sequence there (serve/server.cpp) and frees its KV blocks.
            async for chunk in upstream.content.iter_any():
                yield chunk

    def check_health(self) -> None:
        """Ray Serve's health check: a replica whose server thread has stopped is replaced."""
        if not self._thread.is_alive():
            raise RuntimeError("yirage.ray: the replica's server thread has stopped")

    def describe(self) -> str:
        return self._server.describe()

    def __del__(self) -> None:
        server = getattr(self, "_server", None)
        if server is not None:
            server.stop()


def _replica_lost(error: BaseException) -> bytes:
    return _error_body(
        f"the replica serving this request died before it finished ({type(error).__name__}); "
        "Ray Serve replaces it and the other replicas go on: send the request again",
        "server_error",
    )


class OpenAIIngress:
    """The HTTP side: takes the requests Ray Serve's proxy receives and hands them to an engine
    replica through a deployment handle, so that a replica that dies mid-request ends that
    request with an OpenAI-shaped error instead of a cut connection, and so that the handle's
    router sees the request (for prefix affinity)."""

    def __init__(self, engine) -> None:
        self._engine = engine

    async def __call__(self, request):
        from starlette.responses import Response, StreamingResponse

        path = request.url.path.rstrip("/") or "/"
        if (request.method, path) not in _ROUTES:
            return Response(
                _error_body(f"no route {request.method} {path}"),
                status_code=404,
                media_type="application/json",
            )
        body = await request.body()
        stream = self._engine.options(stream=True).handle.remote(request.method, path, body)
        try:
            head = await stream.__anext__()
        except ray.exceptions.RayError as e:
            stream.cancel()
            return Response(_replica_lost(e), status_code=503, media_type="application/json")
        if head["media_type"] == "text/event-stream":

            async def chunks():
                try:
                    async for chunk in stream:
                        yield chunk
                except ray.exceptions.RayError as e:
                    # The status line went out with the first chunk: the error goes in the
                    # stream, as `yirage serve` ends a cancelled one.
                    yield b"data: " + _replica_lost(e) + b"\n\ndata: [DONE]\n\n"
                finally:
                    stream.cancel()

            headers = dict(head["headers"], **{"Cache-Control": "no-cache"})
            return StreamingResponse(
                chunks(), status_code=head["status"], media_type=head["media_type"],
                headers=headers)
        try:
            payload = b"".join([chunk async for chunk in stream])
        except ray.exceptions.RayError as e:
            return Response(_replica_lost(e), status_code=503, media_type="application/json")
        return Response(payload, status_code=head["status"], media_type=head["media_type"],
                        headers=head["headers"])


class PrefixAffinityRouter(RequestRouter):
    """Sends requests whose prompts begin alike to the same engine replica, where the server's
    prefix cache (llm/paged_kv.h) holds that beginning's KV blocks.

    The key is the first ``prefix_chars`` characters of the prompt (of the chat messages, role
    and content, for chat). Replicas are ranked by rendezvous hashing of the key with each
    replica's id, so a key keeps its replica while the replica set is unchanged and only the
    keys of a replica that leaves move. Ray Serve's router takes the first rank whose replica
    has room under max_ongoing_requests and falls back to the next, so a hot prefix spills over
    instead of queueing without bound. Requests without a prompt (/v1/models, /metrics) go to
    the least loaded of two replicas drawn at random, as Ray Serve's default router does.
    """

    def initialize_state(self, prefix_chars: int = 256, **kwargs: Any) -> None:
        self._prefix_chars = int(prefix_chars)

    @staticmethod
    def prefix_key(body: bytes, prefix_chars: int) -> Optional[str]:
        try:
            doc = json.loads(body)
        except ValueError:
            return None
        if not isinstance(doc, dict):
            return None
        if isinstance(doc.get("messages"), list):
            text = "".join(
                f"{m.get('role')}:{m.get('content')}\n"
                for m in doc["messages"] if isinstance(m, dict))
        elif isinstance(doc.get("prompt"), (str, list)):
            text = json.dumps(doc["prompt"]) if isinstance(doc["prompt"], list) else doc["prompt"]
        else:
            return None
        return text[:prefix_chars]

    async def choose_replicas(self, candidate_replicas, pending_request=None):
        key = None
        if pending_request is not None and len(pending_request.args) == 3:
            key = self.prefix_key(pending_request.args[2], getattr(self, "_prefix_chars", 256))
        if key is None or len(candidate_replicas) < 2:
            return [random.sample(candidate_replicas, min(2, len(candidate_replicas)))]

        def score(replica) -> bytes:
            return hashlib.blake2b(
                (key + "\0" + replica.replica_id.unique_id).encode(), digest_size=8).digest()

        ranked = sorted(candidate_replicas, key=score, reverse=True)
        return [[r] for r in ranked]


# The serve options an engine replica passes to `yirage._Server`; the rest are Ray Serve's.
_SERVER_OPTIONS = (
    "threads",
    "context_length",
    "kv_memory_mib",
    "max_batch",
    "max_queue",
    "fused_blocks",
    "backend",
)
_DEPLOYMENT_OPTIONS = (
    "num_replicas",
    "autoscaling_config",
    "max_ongoing_requests",
    "max_queued_requests",
    "health_check_period_s",
    "health_check_timeout_s",
    "graceful_shutdown_timeout_s",
    "ray_actor_options",
)


def deployment(model: str, prefix_routing: bool = True, prefix_chars: int = 256,
               **options: Any):
    """A bound Ray Serve application serving ``model``: an ``OpenAIIngress`` that takes the HTTP
    requests and ``YirageServer`` engine replicas that run them.

    Server options (``threads``, ``context_length``, ``kv_memory_mib``, ``max_batch``,
    ``max_queue``, ``fused_blocks``, ``backend``) go to each engine replica's server; deployment
    options (``num_replicas`` or ``autoscaling_config``, ``max_ongoing_requests``,
    ``ray_actor_options``, health-check periods) to Ray Serve for the engine replicas. Each
    reserves ``threads`` CPUs unless ``ray_actor_options`` says otherwise. ``prefix_routing``
    routes by the prompt's first ``prefix_chars`` characters (``PrefixAffinityRouter``); False
    keeps Ray Serve's default router. Run it with ``serve.run(deployment(...))``.
    """
    unknown = set(options) - set(_SERVER_OPTIONS) - set(_DEPLOYMENT_OPTIONS)
    if unknown:
        raise yr.Error(
            f"yirage.ray.deployment: unknown option '{sorted(unknown)[0]}' (server options: "
            f"{', '.join(_SERVER_OPTIONS)}; deployment options: {', '.join(_DEPLOYMENT_OPTIONS)})"
        )
    server = {k: v for k, v in options.items() if k in _SERVER_OPTIONS}
    deploy = {k: v for k, v in options.items() if k in _DEPLOYMENT_OPTIONS}
    deploy.setdefault("ray_actor_options", {"num_cpus": int(server.get("threads", 2))})
    # The server queues and batches; Ray Serve need not hold requests back from it.
    deploy.setdefault(
        "max_ongoing_requests",
        int(server.get("max_batch", 16)) + int(server.get("max_queue", 64)))
    if prefix_routing:
        from ray.serve.config import RequestRouterConfig

        deploy["request_router_config"] = RequestRouterConfig(
            request_router_class=PrefixAffinityRouter,
            request_router_kwargs={"prefix_chars": prefix_chars})
    engine = serve.deployment(YirageServer).options(**deploy).bind(model, **server)
    ingress = serve.deployment(OpenAIIngress).options(
        ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000)
    return ingress.bind(engine)


def _parse_arg(value: Any) -> Any:
    """`serve run ... key=value` passes strings; numbers, booleans and JSON objects are parsed."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def app(args: Dict[str, Any]):
    """The application builder for ``serve run yirage.ray:app model=PATH [key=value ...]`` and
    for a Serve config file's ``import_path: yirage.ray:app`` with ``args``."""
    args = {k: _parse_arg(v) for k, v in dict(args).items()}
    if "model" not in args:
        raise yr.Error("yirage.ray:app needs model=PATH (a GGUF file or Hugging Face directory)")
    model = os.path.expanduser(str(args.pop("model")))
    return deployment(model, **args)


# --- Tuning across the cluster -------------------------------------------------------------------


def _copy_entry(source: sqlite3.Connection, target: sqlite3.Connection, entry_id: str) -> None:
    """Copies one tuning-cache entry and its candidates row for row (tune/cache.cpp's schema,
    checksum included, so the C++ cache accepts it as its own)."""
    entry = source.execute("SELECT * FROM entries WHERE id = ?", (entry_id,))
    columns = [d[0] for d in entry.description]
    row = entry.fetchone()
    if row is None:
        raise yr.Error(f"yirage.ray: the worker's cache has no entry {entry_id}")
    target.execute(
        f"INSERT OR REPLACE INTO entries({', '.join(columns)}) "
        f"VALUES({', '.join('?' * len(columns))})",
        row,
    )
    target.execute("DELETE FROM candidates WHERE entry_id = ?", (entry_id,))
    cands = source.execute("SELECT * FROM candidates WHERE entry_id = ?", (entry_id,))
    cand_columns = [d[0] for d in cands.description]
    target.executemany(
        f"INSERT INTO candidates({', '.join(cand_columns)}) "
        f"VALUES({', '.join('?' * len(cand_columns))})",
        cands.fetchall(),
    )


def _tune_one(graph_json: str, backend: str, config: Dict[str, Any],
              budget: Optional[float]) -> Dict[str, Any]:
    """One Ray task: superoptimize one graph into a cache of this task's own, and return the
    report and the cache's rows (schema and entries), which the caller merges into its cache."""
    graph = yr.from_json(graph_json)
    with tempfile.TemporaryDirectory(prefix="yirage-ray-tune-") as tmp:
        cache = os.path.join(tmp, "tuning.sqlite")
        optimized = graph.superoptimize(
            backend=backend, config=dict(config, cache=cache), budget=budget
        )
        report = optimized.report()
        with sqlite3.connect(cache) as db:
            schema = [sql for (sql,) in db.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL")]
            meta = db.execute("SELECT k, v FROM meta").fetchall()
            ids = [i for (i,) in db.execute("SELECT id FROM entries")]
        with open(cache, "rb") as f:
            blob = f.read()
    return {
        "report": {k: v for k, v in report.items() if _plain(v)},
        "mugraph": optimized.mugraph.to_json(),
        "schema": schema,
        "meta": meta,
        "entry_ids": ids,
        "cache_file": blob,
        "node": ray.util.get_node_ip_address(),
        "node_id": ray.get_runtime_context().get_node_id(),
        "pid": os.getpid(),
    }


def _plain(value: Any) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def _default_cache_path() -> str:
    # tune::TuningCache::default_path's order.
    base = os.environ.get("YIRAGE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "yirage")
    return os.path.join(base, "tuning.sqlite")


def _merge(result: Dict[str, Any], cache_path: str) -> None:
    with tempfile.NamedTemporaryFile(suffix=".sqlite") as f:
        f.write(result["cache_file"])
        f.flush()
        os.makedirs(os.path.dirname(os.path.abspath(cache_path)), exist_ok=True)
        with sqlite3.connect(f.name) as source, sqlite3.connect(cache_path) as target:
            existing = {name for (name,) in target.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not existing:
                for sql in result["schema"]:
                    target.execute(sql)
                target.executemany("INSERT INTO meta(k, v) VALUES(?, ?)", result["meta"])
            else:
                mine = dict(target.execute("SELECT k, v FROM meta").fetchall())
                theirs = dict(result["meta"])
                if mine.get("schema") != theirs.get("schema"):
                    raise yr.Error(
                        f"yirage.ray: {cache_path} has cache schema {mine.get('schema')}, the "
                        f"worker's is {theirs.get('schema')}; run the same yirage on both")
            for entry_id in result["entry_ids"]:
                _copy_entry(source, target, entry_id)


GraphLike = Union["yr.KernelGraph", str, "os.PathLike[str]"]


def tune_graphs(
    graphs: Iterable[Union[GraphLike, Tuple[str, GraphLike]]],
    backend: str = "cpu",
    config: Optional[Dict[str, Any]] = None,
    budget: Optional[float] = None,
    cache: Optional[str] = None,
    num_cpus: int = 1,
    max_retries: int = 2,
) -> List[Dict[str, Any]]:
    """Superoptimizes each graph in a Ray task and merges the winners into the tuning cache.

    graphs: KernelGraphs, JSON file paths, or (name, graph) pairs such as
      ``yr.LLM(path, fused_blocks=False).block_graphs()`` returns for a model.
    backend, config, budget: as ``KernelGraph.superoptimize`` takes them (config's ``cache`` is
      the worker's own and cannot be given).
    cache: the caller's tuning cache (default: the one superoptimize reads,
      $YIRAGE_CACHE_DIR/tuning.sqlite or ~/.cache/yirage/tuning.sqlite).
    num_cpus: CPUs each task reserves (the search and the profiling use them).
    max_retries: how often Ray runs a task again whose worker died.

    Ray must be initialized (``ray.init(address)``). Returns one dict per graph, in order: name,
    report (superoptimize's report), mugraph (the winner's JSON), node, node_id and pid (where it
    ran: the node's IP address, Ray's id of the node, the worker's process).
    """
    config = dict(config or {})
    if "cache" in config:
        raise yr.Error("yirage.ray.tune_graphs: config 'cache' is the worker's; pass cache=")
    named: List[Tuple[str, str]] = []
    for i, item in enumerate(graphs):
        name, graph = item if isinstance(item, tuple) else (None, item)
        if isinstance(graph, yr.KernelGraph):
            named.append((name or f"graph {i}", graph.to_json()))
        else:
            path = os.fspath(graph)
            named.append((name or path, yr.load(path).to_json()))
    task = ray.remote(num_cpus=num_cpus, max_retries=max_retries)(_tune_one)
    refs = [task.remote(doc, backend, config, budget) for _, doc in named]
    results = ray.get(refs)
    cache_path = cache or _default_cache_path()
    out = []
    for (name, _), result in zip(named, results):
        _merge(result, cache_path)
        out.append({
            "name": name,
            "report": result["report"],
            "mugraph": result["mugraph"],
            "node": result["node"],
            "node_id": result["node_id"],
            "pid": result["pid"],
        })
    return out


__all__ = [
    "OpenAIIngress", "PrefixAffinityRouter", "YirageServer", "app", "deployment", "tune_graphs"]
