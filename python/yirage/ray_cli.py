"""Tuning on a Ray cluster from outside Python's ``yirage.ray``: ``superoptimize(cluster=...)``
and the ``yirage optimize --ray ADDRESS`` command, which runs this module as a subprocess::

    python3 -m yirage.ray_cli tune --address 127.0.0.1:6379 [--backend cpu] [--budget 60]
        [--seed 0] [--threads N] [--max-states N] [--cache PATH] [--result FILE] GRAPH.json

``tune`` sends the graph to one Ray task (:func:`yirage.ray.tune_graphs`) and merges the winner's
tuning-cache entry into ``--cache``; the caller then reads it as a cache hit. ``--result`` receives
one JSON object: ``node`` and ``pid`` of the task, or ``error`` (one line) when it failed.

This module imports Ray only when asked to, so that a missing Ray is one clear line, not an
ImportError from deep inside ``yirage.ray``.
"""

import argparse
import json
import logging
import socket
import sys
import warnings
from typing import Any, Dict, Optional

import yirage as yr

INSTALL = 'pip install "yirage[ray]"'

# The address this module connected Ray to, if it did (None: it did not, or Ray was initialized by
# the caller, whose connection is used as it is).
_connected: Optional[str] = None


def _ray_modules(who: str):
    try:
        import ray
    except ImportError:
        raise yr.Error(f"{who}: ray is not installed ({INSTALL})") from None
    try:
        import yirage.ray as yirage_ray
    except ImportError as e:
        raise yr.Error(f"{who}: Ray's serve component is missing ({e}; {INSTALL})") from None
    return ray, yirage_ray


def _unreachable(address: str) -> Optional[str]:
    """Why nothing answers at ``address`` (host:port, or ray://host:port), or None. ray.init retries
    an address where nothing listens for minutes; a TCP connect says so at once."""
    if address in ("auto", "local"):
        return None
    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return "not HOST:PORT"
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as e:
        return e.strerror or type(e).__name__
    return None


def connect(address: str, who: str = "superoptimize(cluster=...)"):
    """Ray, connected to the cluster at ``address`` unless Ray is initialized already (then that
    connection is used as it is, unless this module made it to another address)."""
    global _connected
    ray, yirage_ray = _ray_modules(who)
    if ray.is_initialized():
        if _connected is not None and _connected != address:
            raise yr.Error(f"{who}: Ray is connected to {_connected}, not {address}; call "
                           f"ray.shutdown() first")
        return ray, yirage_ray
    why = _unreachable(address)
    if why:
        raise yr.Error(f"{who}: cannot reach the Ray cluster at {address} ({why})")
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                 include_dashboard=False)
    except Exception as e:  # ConnectionError, ValueError, RuntimeError: all mean "not there"
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise yr.Error(f"{who}: cannot reach the Ray cluster at {address} ({first})") from None
    _connected = address
    return ray, yirage_ray


def superoptimize_on_cluster(graph: "yr.KernelGraph", cluster: str, backend: str = "auto",
                             config: Optional[Dict[str, Any]] = None,
                             budget: Optional[float] = None, verbose: bool = False):
    """``graph.superoptimize(...)`` with the search and profiling in a Ray task on ``cluster``.

    The task's winner is merged into this machine's tuning cache (config's ``cache``, else the
    default), and the returned OptimizedGraph is what a local ``superoptimize`` loads from that
    cache, so it is the same kind of object with the same report, ``cache_hit`` True. A worker of
    another device kind than this machine gives an entry for that device; this machine then tunes
    again locally, with a warning.
    """
    who = "superoptimize(cluster=...)"
    config = dict(config or {})
    if "checkpoint" in config:
        raise yr.Error(f"{who}: config 'checkpoint' is a file on this machine; not with cluster=")
    cache = config.pop("cache", None)
    config.pop("read_cache", None)  # the task's cache is a fresh one; the load below must read
    _, yirage_ray = connect(cluster, who)
    (result,) = yirage_ray.tune_graphs([graph], backend=backend, config=config, budget=budget,
                                       cache=cache)
    local = dict(config, **({"cache": cache} if cache else {}))
    optimized = graph.superoptimize(backend=backend, config=local, budget=budget, verbose=verbose)
    if not optimized.report().get("cache_hit"):
        warnings.warn(f"{who}: the cluster's entry (node {result['node']}) is not one this machine "
                      f"can use (another device, engine version or codegen settings); it was "
                      f"tuned again here", RuntimeWarning, stacklevel=3)
    return optimized


CLI = "optimize --ray"  # how `yirage optimize --ray` names itself in its errors


def _tune(args: argparse.Namespace) -> Dict[str, Any]:
    _, yirage_ray = connect(args.address, CLI)
    config: Dict[str, Any] = {"seed": args.seed}
    if args.threads:
        config["threads"] = args.threads
    if args.max_states:
        config["max_states"] = args.max_states
    if args.top_k is not None:
        config["max_candidates"] = args.top_k
    if args.profile_all:
        config["profile_all"] = True
    (result,) = yirage_ray.tune_graphs([args.graph], backend=args.backend, config=config,
                                       budget=args.budget, cache=args.cache)
    return {"node": result["node"], "pid": result["pid"],
            "cache_hit": bool(result["report"].get("cache_hit"))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m yirage.ray_cli")
    commands = parser.add_subparsers(dest="command", required=True)
    tune = commands.add_parser("tune", help="tune one graph in a Ray task, merge its entry")
    tune.add_argument("--address", required=True, help="the Ray cluster's address")
    tune.add_argument("--backend", default="auto")
    tune.add_argument("--budget", type=float, default=None)
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--threads", type=int, default=0)
    tune.add_argument("--max-states", type=int, default=0)
    tune.add_argument("--top-k", type=int, default=None,
                      help="search candidates profiled (superoptimize's config max_candidates)")
    tune.add_argument("--profile-all", action="store_true", help="profile every search candidate")
    tune.add_argument("--cache", default=None, help="the tuning cache to merge into")
    tune.add_argument("--result", default=None, help="a file for the JSON outcome")
    tune.add_argument("graph")
    args = parser.parse_args(argv)
    try:
        outcome = _tune(args)
        code = 0
    except Exception as e:  # yr.Error, or a task's RayTaskError: one line for the caller
        lines = str(e).strip().splitlines()
        message = lines[0] if lines else type(e).__name__
        if not message.startswith(CLI):
            message = f"{CLI}: {message}"
        outcome, code = {"error": message}, 1
    if args.result:  # the caller (yirage optimize --ray) reports it
        with open(args.result, "w") as f:
            json.dump(outcome, f)
    elif code:
        print(f"error: {outcome['error']}", file=sys.stderr)
    if not code:
        print(json.dumps(outcome))
    return code


if __name__ == "__main__":
    sys.exit(main())
