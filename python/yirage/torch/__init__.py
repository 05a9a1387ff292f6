"""PyTorch integration: ``torch.compile(model, backend="yirage")`` and ``explain``.

The backend is registered with dynamo through the ``torch_dynamo_backends`` entry point of this
package, so after ``pip install`` it is found by name with nothing imported::

    import torch
    compiled = torch.compile(model, backend="yirage", options={"budget": 5})
    with torch.no_grad():
        y = compiled(x)

What YiRage's IR covers is taken in the largest subgraphs possible, each searched, verified,
tuned and cached by the same pipeline as ``KernelGraph.superoptimize``, on the backend that
holds the tensors; the rest runs in PyTorch as under eager. Each compile logs one line
(logger ``yirage.torch``) saying what was taken and what stayed in PyTorch, and why;
``explain(model, *inputs)`` prints and returns the details with times against eager.

Inference only: a graph that needs gradients is refused with a clear error. Static shapes are
specialised, one compile per shape (each subgraph cached by the tuner). When dynamo passes
symbolic shapes (``dynamic=True``, or after it saw a second size), the graph is compiled again
for each concrete size met, keeping the ``max_shapes`` (default 8) most recently used.

Options (``torch.compile(..., options={...})``): budget, cache, max_shapes, on_error, threads.
"""
import collections
import statistics
import time
from dataclasses import dataclass
from typing import Any, List

import torch
from torch._functorch.aot_autograd import aot_module_simplified

import yirage as yr

from ._backend import OPTIONS, CompileReport, SubgraphReport, compile_reports, log
from ._backend import partition_and_compile

__all__ = ["backend", "explain", "Explanation", "CompileReport", "SubgraphReport", "OPTIONS"]


def _check_options(options):
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise yr.Error(f"yirage.torch: unknown option(s) {sorted(unknown)}; known: "
                       + ", ".join(f"{k} ({v})" for k, v in OPTIONS.items()))
    if options.get("on_error", "raise") not in ("raise", "eager"):
        raise yr.Error("yirage.torch: option on_error must be 'raise' or 'eager'")


def _refuse_training(example_inputs):
    if torch.is_grad_enabled() and any(
            isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs):
        raise yr.Error(
            "yirage.torch: training is not supported (inputs or parameters require grad with "
            "grad mode on); run inference under torch.no_grad() or torch.inference_mode()")


def _aot_compile(gm, example_inputs, options):
    def forward_compiler(aten_gm, _inputs):
        module, report = partition_and_compile(aten_gm, options, len(compile_reports))
        compile_reports.append(report)
        log.info(report.summary())
        return module

    def backward_compiler(*_):
        raise yr.Error("yirage.torch: training is not supported (no backward compiler)")

    return aot_module_simplified(gm, example_inputs, fw_compiler=forward_compiler,
                                 bw_compiler=backward_compiler)


def _is_symbolic(x):
    if isinstance(x, torch.SymInt):
        return True
    return isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in x.shape)


class _PerShape:
    """A dynamo graph with symbolic shapes, compiled again for each concrete size it meets;
    the max_shapes most recently used stay compiled."""

    def __init__(self, gm, options):
        self.gm, self.options = gm, options
        self.limit = int(options.get("max_shapes", 8))
        if self.limit < 1:
            raise yr.Error("yirage.torch: option max_shapes must be at least 1")
        self.compiled = collections.OrderedDict()

    def __call__(self, *args):
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)
        fn = self.compiled.get(key)
        if fn is None:
            if len(self.compiled) >= self.limit:
                dropped, _ = self.compiled.popitem(last=False)
                log.info(f"dynamic shapes: {self.limit} sizes compiled (max_shapes); dropping "
                         f"the least recently used, {[k[0] for k in dropped if isinstance(k, tuple)]}")
            fn = _aot_compile(self.gm, list(args), self.options)
            self.compiled[key] = fn
        self.compiled.move_to_end(key)
        return fn(*args)


def backend(gm: torch.fx.GraphModule, example_inputs: List[Any], options=None, **_ignored):
    """The dynamo backend behind ``torch.compile(m, backend="yirage")``."""
    options = dict(options or {})
    _check_options(options)
    _refuse_training(example_inputs)
    if any(_is_symbolic(x) for x in example_inputs):
        return _PerShape(gm, options)
    return _aot_compile(gm, example_inputs, options)


def _median_seconds(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@dataclass
class Explanation:
    """What explain() found: a report per compiled graph (graph breaks make several), the
    model's time compiled and eager, and the largest difference of its outputs from eager."""

    reports: List[CompileReport]
    seconds: float
    eager_seconds: float
    max_abs_difference: float

    @property
    def subgraphs(self) -> List[SubgraphReport]:
        return [s for r in self.reports for s in r.subgraphs]

    @property
    def left_in_pytorch(self):
        return [op for r in self.reports for op in r.left_in_pytorch]

    @property
    def cache_hits(self) -> int:
        return sum(1 for s in self.subgraphs if s.taken and s.cache_hit)

    def __str__(self):
        lines = [f"yirage.torch.explain: {len(self.reports)} graph(s) compiled "
                 f"({max(len(self.reports) - 1, 0)} graph break(s)); whole model "
                 f"{self.seconds * 1e6:.0f} µs vs eager {self.eager_seconds * 1e6:.0f} µs "
                 f"({self.eager_seconds / self.seconds:.2f}x); max |compiled - eager| "
                 f"{self.max_abs_difference:.3g}"]
        for r in self.reports:
            lines.append(f"graph {r.index} (inputs {r.shapes}):")
            for s in r.subgraphs:
                lines.append(f"  {s.name}: {len(s.ops)} ops: {', '.join(s.ops)}")
                if not s.taken:
                    lines.append(f"    NOT taken: {s.reason}")
                    continue
                timing = ""
                if getattr(s, "seconds", None):
                    timing = (f"; {s.seconds * 1e6:.0f} µs vs eager {s.eager_seconds * 1e6:.0f}"
                              f" µs ({s.eager_seconds / s.seconds:.2f}x)")
                lines.append(
                    f"    taken on {s.backend}: {s.kernels_before} kernels -> {s.kernels_after} "
                    f"({s.chosen}), verified {s.verified}, "
                    f"{'cache hit' if s.cache_hit else f'searched {s.search_seconds:.1f} s'}"
                    f"{timing}")
            for op in r.left_in_pytorch:
                lines.append(f"  left in PyTorch: {op['op']} ({op['node']}): {op['reason']}")
        return "\n".join(lines)


def explain(model, *inputs, repeats: int = 5, **options) -> Explanation:
    """Compiles ``model`` with the yirage backend (after torch._dynamo.reset(), so that it
    compiles afresh), runs it on ``inputs`` under no_grad, and prints and returns what each
    compiled graph became: per subgraph its ops, whether YiRage took it, kernels before and
    after fusion, verified, cache hit, and its median time against the same ops under eager;
    the ops left in PyTorch with the reason; the whole model's time against eager."""
    torch._dynamo.reset()
    first = len(compile_reports)
    compiled = torch.compile(model, backend="yirage", options=options or None)
    with torch.no_grad():
        out = compiled(*inputs)
        reports = compile_reports[first:]
        runners = [s for r in reports for s in r.subgraphs if s.taken]
        for s in runners:
            s.runner.keep_inputs = True
        compiled(*inputs)
        for s in runners:
            s.runner.keep_inputs = False
            args = s.runner.last_inputs
            s.runner.last_inputs = None
            if args is None:
                continue
            s.seconds = _median_seconds(lambda: s.runner(*args), repeats)
            s.eager_seconds = _median_seconds(lambda: s.eager(*args), repeats)
        expected = model(*inputs)
        seconds = _median_seconds(lambda: compiled(*inputs), repeats)
        eager_seconds = _median_seconds(lambda: model(*inputs), repeats)
    outs = out if isinstance(out, (tuple, list)) else [out]
    exps = expected if isinstance(expected, (tuple, list)) else [expected]
    difference = max(float((a.float() - b.float()).abs().max()) for a, b in zip(outs, exps))
    explanation = Explanation(list(reports), seconds, eager_seconds, difference)
    print(explanation)
    return explanation
