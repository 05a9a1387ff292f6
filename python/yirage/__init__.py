"""YiRage: a superoptimizer for the tensor programs of LLM inference.

Build a kernel graph, superoptimize it, and call the result::

    import numpy as np
    import yirage as yr

    graph = yr.new_kernel_graph()
    x = graph.new_input(dims=(8, 64), dtype=yr.float32)
    w = graph.new_input(dims=(64, 32), dtype=yr.float32)
    graph.mark_output(graph.silu(graph.matmul(graph.rms_norm(x, normalized_shape=(64,)), w)))
    optimized = graph.superoptimize(backend="auto")
    (y,) = optimized(inputs=[np.ones((8, 64), np.float32), np.ones((64, 32), np.float32)])
    print(optimized.report())

The search proves every candidate equivalent to the graph before it is used, and
``superoptimize`` never falls back to another backend than the one asked for. Errors in the
C++ core arrive as :class:`yirage.Error` (a ``ValueError``) with the core's one-line message.
"""

import json as _json
import os as _os
from typing import Any, Dict, Mapping, Optional, Union

from ._yirage import (
    DType,
    Error,
    LLM,
    KernelGraph,
    OptimizedGraph,
    Tensor,
    __version__,
    describe_backends,
    get_available_backends,
    get_default_backend,
    load,
)
from ._yirage import _verify
from ._yirage import _TUNE_WORKER_FLAG, _set_tune_worker
from ._yirage import from_json as _from_json

# Tracebacks name the exception as users import it.
Error.__module__ = "yirage"


def _register_tune_worker() -> None:
    """Names the `yirage` command of this build or install as the tuning worker.

    Tuning checks and profiles each candidate in a worker process, so that generated code that
    crashes or hangs costs that candidate, not this interpreter. The interpreter cannot be the
    worker; the command built or installed with this module can (only that one: another build's
    would refuse the work). Without it, candidates run in this process.
    """
    import sysconfig

    here = _os.path.dirname(_os.path.abspath(__file__))
    for candidate in (
        _os.path.join(here, "..", "..", "yirage"),  # the build folder: <build>/python/yirage
        _os.path.join(sysconfig.get_path("scripts"), "yirage"),  # pip install
    ):
        if _os.path.isfile(candidate) and _os.access(candidate, _os.X_OK):
            _set_tune_worker([_os.path.realpath(candidate), _TUNE_WORKER_FLAG])
            return


_register_tune_worker()

float32 = DType.float32
float16 = DType.float16
bfloat16 = DType.bfloat16
int32 = DType.int32
int8 = DType.int8
uint8 = DType.uint8

# Mirage's name for a kernel-graph tensor.
DTensor = Tensor


def new_kernel_graph() -> KernelGraph:
    """Returns an empty kernel graph.

    Add inputs with ``g.new_input(dims=..., dtype=yr.float16)``, ops with ``g.matmul``,
    ``g.rms_norm``, ``g.silu``, ``g.exp``, ``g.reduction``, ``g.div``, ... (each checks its
    operands and raises :class:`yirage.Error` naming the rule broken), mark the results with
    ``g.mark_output(t)``, then call ``g.superoptimize()`` for a callable that runs the best
    verified fused program.
    """
    return KernelGraph()


def from_json(doc: Union[str, Mapping[str, Any]]) -> KernelGraph:
    """Builds a kernel graph from its JSON: the text ``KernelGraph.to_json()`` returns, or the
    parsed document (a dict). Raises :class:`yirage.Error` naming the JSON path of a problem."""
    if not isinstance(doc, str):
        doc = _json.dumps(doc)
    return _from_json(doc)


def verify(
    graph: Union[KernelGraph, str, "_os.PathLike[str]"],
    mugraph: Union[KernelGraph, str, "_os.PathLike[str]"],
    seed: Optional[int] = None,
) -> Dict[str, Any]:
    """Checks a µGraph (a kernel graph whose fused nodes hold block graphs) against the kernel
    graph it should compute, as ``yirage verify`` does; either may be a graph or a JSON file path.

    Returns a dict: ``verified`` (bool), ``reason`` (one line when not verified, else None),
    ``trials``, ``false_accept_bound``, ``per_trial_bound``, ``bound_met``, ``assumptions`` (what
    the bound rests on), ``mismatch`` (the first differing output element, or None) and
    ``float_checks`` (one per input distribution: ``passed``, ``max_error``, ``tolerance``,
    ``input_graph_error_from_f32`` where the input graph is ill-conditioned in its dtype and the
    µGraph was held to the graph widened to f32 instead, else None, and ``summary``). Raises
    :class:`yirage.Error` when the two take different inputs or produce different outputs."""

    def graph_of(g):
        return g if isinstance(g, KernelGraph) else load(_os.fspath(g))

    return _json.loads(_verify(graph_of(graph), graph_of(mugraph), seed))


_native_superoptimize = KernelGraph.superoptimize


def superoptimize(
    graph: KernelGraph,
    backend: str = "auto",
    config: Optional[Mapping[str, Any]] = None,
    budget: Optional[float] = None,
    verbose: bool = False,
    cluster: Optional[str] = None,
) -> OptimizedGraph:
    if cluster is None:
        return _native_superoptimize(graph, backend, config, budget, verbose)
    from .ray_cli import superoptimize_on_cluster

    return superoptimize_on_cluster(graph, cluster, backend, config, budget, verbose)


# One function serves as yr.superoptimize(graph, ...) and as graph.superoptimize(...), with the
# native docstring and the cluster argument, which the Python side adds, described after it.
superoptimize.__doc__ = (_native_superoptimize.__doc__ or "").rstrip() + (
    "\n\ncluster: None, or a Ray cluster's address (ray start's, e.g. '127.0.0.1:6379'): the\n"
    "  search and profiling run in a Ray task there (yirage.ray.tune_graphs), the winner's\n"
    "  cache entry is merged into this machine's tuning cache (config's cache, else the\n"
    "  default), and the result is loaded from it: the same OptimizedGraph, cache_hit True.\n"
    "  Connects with ray.init(address=cluster) unless Ray is initialized already. Needs\n"
    "  pip install \"yirage[ray]\" here and yirage on the cluster's nodes.\n"
)
KernelGraph.superoptimize = superoptimize

__all__ = [
    "DTensor",
    "DType",
    "Error",
    "KernelGraph",
    "LLM",
    "OptimizedGraph",
    "Tensor",
    "__version__",
    "bfloat16",
    "describe_backends",
    "float16",
    "float32",
    "from_json",
    "get_available_backends",
    "get_default_backend",
    "int32",
    "int8",
    "load",
    "new_kernel_graph",
    "superoptimize",
    "uint8",
    "verify",
]
