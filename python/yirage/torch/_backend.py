"""The `yirage` dynamo backend: partition the ATen graph, superoptimize what YiRage covers.

Dynamo hands over an FX graph; aot_autograd lowers it to ATen ops with the parameters as
inputs (inference only). Every node is tried alone in a scratch kernel graph (_translate.py);
torch's capability-based partitioner groups the covered nodes into the largest subgraphs that
keep the graph acyclic. Each subgraph that computes something (not layout ops alone) becomes one
kernel graph, which yirage.KernelGraph.superoptimize takes through tune::optimize on the backend
holding the tensors: a cache hit returns the stored winner, otherwise it is searched, verified,
profiled and stored. The subgraph's FX module is then replaced by a YirageSubgraph that calls
the compiled winner; everything else runs as ATen ops, as in eager. A subgraph that cannot be
built or optimized is not dropped quietly: the compile fails with the reason, unless
options["on_error"] == "eager", which keeps it in PyTorch and says so in the report and log.
"""
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition
from torch.fx.passes.operator_support import OperatorSupportBase

import yirage as yr

from . import _translate as tr

log = logging.getLogger("yirage.torch")
if not log.handlers:
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    log.addHandler(_handler)
    log.setLevel(logging.INFO)
    log.propagate = False

OPTIONS = {
    "budget": "seconds the search may take per subgraph (default 10)",
    "cache": "the tuning cache file (default $YIRAGE_CACHE_DIR/tuning.sqlite)",
    "max_nodes": "kernel-graph nodes per subgraph, inputs included (default 24; the search takes 64)",
    "max_candidates": "candidates the tuner measures per subgraph",
    "max_shapes": "compiled sizes kept per graph when shapes are dynamic (default 8)",
    "on_error": "'raise' (default) or 'eager': what a subgraph YiRage fails on does",
    "threads": "search threads",
}

# Every compile's report, in order; explain() reads the ones its run adds.
compile_reports: List["CompileReport"] = []


@dataclass
class SubgraphReport:
    name: str
    ops: List[str]
    taken: bool
    reason: Optional[str] = None  # why not taken
    backend: Optional[str] = None
    kernels_before: Optional[int] = None
    kernels_after: Optional[int] = None
    verified: Optional[bool] = None
    chosen: Optional[str] = None
    cache_hit: Optional[bool] = None
    search_seconds: float = 0.0
    tuning_seconds: float = 0.0
    runner: Any = field(default=None, repr=False)  # the YirageSubgraph, when taken
    eager: Any = field(default=None, repr=False)  # the subgraph's FX module, as eager runs it


@dataclass
class CompileReport:
    index: int
    subgraphs: List[SubgraphReport]
    left_in_pytorch: List[Dict[str, str]]  # {"op": ..., "node": ..., "reason": ...}
    shapes: List[Any]
    seconds: float = 0.0

    def summary(self) -> str:
        taken = [s for s in self.subgraphs if s.taken]
        hits = sum(1 for s in taken if s.cache_hit)
        before = sum(s.kernels_before for s in taken)
        after = sum(s.kernels_after for s in taken)
        verified = all(s.verified for s in taken)
        reasons = {}
        for op in self.left_in_pytorch:
            reasons.setdefault(op["op"], op["reason"])
        left = "; ".join(f"{op} ({why})" for op, why in list(reasons.items())[:6])
        more = f"; +{len(reasons) - 6} more" if len(reasons) > 6 else ""
        not_taken = [s for s in self.subgraphs if not s.taken]
        return (
            f"graph {self.index}: {len(taken)} subgraph(s) on YiRage ({sum(len(s.ops) for s in taken)} ops, "
            f"{before} -> {after} kernels, {'all verified' if verified else 'NOT all verified'}, "
            f"{hits} from the cache, {len(taken) - hits} searched), "
            f"{len(not_taken)} not taken{': ' + not_taken[0].reason if not_taken else ''}; "
            f"{len(self.left_in_pytorch)} op(s) left in PyTorch{': ' + left + more if left else ''}; "
            f"{self.seconds:.1f} s")


def _to_torch(array):
    """A NumPy output as a torch tensor over the same memory (DLPack)."""
    return torch.from_dlpack(array)


def _bf16_to_torch(array):
    """A bfloat16 output: ml_dtypes' bfloat16 has no DLPack code, so by its bits."""
    return torch.from_dlpack(array.view("uint16")).view(torch.bfloat16)


class _Calls:
    """What the calls of one YirageSubgraph did, written on every call. A plain object, because
    nn.Module's __setattr__ (parameter and submodule bookkeeping) costs a few µs an attribute."""
    __slots__ = ("count", "input_copies", "last")

    def __init__(self):
        self.count = 0
        self.input_copies = 0
        self.last = {}


class YirageSubgraph(torch.nn.Module):
    """Runs one subgraph's compiled winner. Inputs cross in place (host tensors as NumPy views,
    bfloat16 ones by DLPack); an input whose layout is not row-major is made contiguous first,
    and counted. `last` holds the latest call's data pointers and those the module read and
    wrote (the zero-copy evidence)."""

    def __init__(self, optimized, constants, plan, single_output, bf16_outputs, numpy_inputs):
        super().__init__()
        self.optimized = optimized
        self.constants = constants
        self.plan = plan  # per output: ("run", k) or ("input", i)
        self.single_output = single_output
        self.converters = [_bf16_to_torch if bf16 else _to_torch for bf16 in bf16_outputs]
        # Host tensors that NumPy can hold cross as NumPy views (Tensor.numpy is a C call, the
        # DLPack export a Python one: about 1.5 µs less an input); bfloat16 ones by DLPack.
        self.numpy_inputs = numpy_inputs
        self.state = _Calls()
        self.keep_inputs = False  # explain() sets it to time the subgraph on its real inputs
        self.last_inputs = None

    calls = property(lambda self: self.state.count)
    input_copies = property(lambda self: self.state.input_copies)
    last = property(lambda self: self.state.last)

    def forward(self, *args):
        copied, inputs = 0, []
        for a, as_numpy in zip(args, self.numpy_inputs):
            if not a.is_contiguous():
                a = a.contiguous()
                copied += 1
            inputs.append(a.numpy(force=True) if as_numpy else a)
        outputs = self.optimized(inputs=inputs + self.constants)
        run = self.optimized.last_run()
        copied += sum(run["inputs_copied"][: len(args)])
        results = [convert(o) for convert, o in zip(self.converters, outputs)]
        state = self.state
        state.count += 1
        state.input_copies += copied
        state.last = {
            "input_pointers": [a.data_ptr() for a in args],
            "module_input_addresses": run["input_addresses"][: len(args)],
            "output_pointers": [r.data_ptr() for r in results],
            "module_output_addresses": run["output_addresses"],
            "input_copies": copied,
        }
        if self.keep_inputs:
            self.last_inputs = args
        picked = tuple(results[k] if kind == "run" else args[k] for kind, k in self.plan)
        return picked[0] if self.single_output else picked


class _Coverage(OperatorSupportBase):
    def __init__(self):
        super().__init__()
        self.reasons = {}

    def is_node_supported(self, submodules, node):
        if node.op != "call_function":
            return False
        if node not in self.reasons:
            try:
                tr.scratch_translate(node)
                self.reasons[node] = None
            except tr.Uncovered as e:
                self.reasons[node] = str(e)
        return self.reasons[node] is None


def _backend_name(values):
    devices = {v.device.type for v in values if isinstance(v, torch.Tensor)}
    if len(devices) > 1:
        raise yr.Error(f"a YiRage subgraph takes tensors on several devices: {sorted(devices)}")
    device = devices.pop() if devices else "cpu"
    name = {"cpu": "cpu", "cuda": "cuda"}.get(device)
    if name is None or name not in yr.get_available_backends():
        raise yr.Error(
            f"tensors on {device} need YiRage's '{name or device}' backend, which is not available "
            f"here (available: {', '.join(yr.get_available_backends())})")
    return name


def _build_subgraph(sub_gm, call_node, options, report):
    """Translates one fused FX submodule into a kernel graph and superoptimizes it."""
    builder = tr.Builder()
    env, placeholders = {}, []
    for i, (ph, arg) in enumerate(zip(
            [n for n in sub_gm.graph.nodes if n.op == "placeholder"], call_node.args)):
        value = tr.value_of(arg)
        tr.check_tensor(value, f"input {arg.name}")
        env[ph] = builder.input_like(value, arg.name)
        placeholders.append(ph)
    output_node = None
    for n in sub_gm.graph.nodes:
        if n.op == "call_function":
            env[n] = tr.translate_node(builder, n, env)
        elif n.op == "output":
            output_node = n
    results = output_node.args[0]
    single = not isinstance(results, (tuple, list))
    results = [results] if single else list(results)
    plan, marked, bf16_outputs = [], {}, []
    for r in results:
        if r in placeholders:
            plan.append(("input", placeholders.index(r)))
            continue
        tensor = env[r]
        key = id(tensor)
        if key not in marked:
            marked[key] = len(marked)
            builder.graph.mark_output(tensor, name=f"out{marked[key]}")
            bf16_outputs.append(tr.value_of(r).dtype == torch.bfloat16)
        plan.append(("run", marked[key]))
    values = [tr.value_of(a) for a in call_node.args]
    backend = _backend_name(values)
    config = {k: options[k] for k in ("cache", "threads", "max_candidates") if k in options}
    start = time.perf_counter()
    optimized = builder.graph.superoptimize(
        backend=backend, config=config or None, budget=float(options.get("budget", 10.0)))
    r = optimized.report()
    report.taken, report.backend = True, backend
    report.kernels_before, report.kernels_after = r["unfused_kernels"], r["kernels"]
    report.verified, report.chosen, report.cache_hit = r["verified"], r["chosen"], r["cache_hit"]
    report.search_seconds = r["search_seconds"]
    report.tuning_seconds = time.perf_counter() - start
    numpy_inputs = [v.device.type == "cpu" and v.dtype != torch.bfloat16 for v in values]
    return YirageSubgraph(optimized, builder.constants, plan, single, bf16_outputs, numpy_inputs)


def partition_and_compile(gm, options, index):
    """Replaces the covered subgraphs of the ATen graph `gm` by YiRage; returns the module and
    its report."""
    start = time.perf_counter()
    coverage = _Coverage()
    partitioner = CapabilityBasedPartitioner(gm, coverage, allows_single_node_partition=True)
    max_nodes = int(options.get("max_nodes", 24))
    if not 2 <= max_nodes <= tr.SEARCH_MAX_NODES:
        raise yr.Error(f"yirage.torch: option max_nodes must be 2 to {tr.SEARCH_MAX_NODES}")
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    runs = [run for p in partitioner.propose_partitions()
            for run in tr.split_to_fit(sorted(p.nodes, key=order.get), max_nodes)]
    computing = [Partition(id=i, nodes=run) for i, run in enumerate(
        r for r in runs if any(n.target not in tr.LAYOUT_OPS for n in r))]
    in_partition = {n for p in computing for n in p.nodes}
    left = []
    for n in gm.graph.nodes:
        if n.op != "call_function" or n in in_partition:
            continue
        reason = coverage.reasons.get(n) or "only layout ops around it (view, permute, ...): " \
            "as a subgraph it would only copy"
        left.append({"op": tr.op_name(n), "node": n.name, "reason": reason})
    fused = partitioner.fuse_partitions(computing) if computing else gm
    subgraphs = []
    for node in list(fused.graph.nodes):
        if node.op != "call_module" or not node.target.startswith("fused_"):
            continue
        sub_gm = fused.get_submodule(node.target)
        ops = [tr.op_name(n) for n in sub_gm.graph.nodes if n.op == "call_function"]
        report = SubgraphReport(name=node.target, ops=ops, taken=False, eager=sub_gm)
        try:
            runner = _build_subgraph(sub_gm, node, options, report)
        except (yr.Error, tr.Uncovered) as e:
            if options.get("on_error", "raise") != "eager":
                raise yr.Error(f"yirage.torch: subgraph {node.target} ({len(ops)} ops): {e}") from None
            report.reason = f"YiRage failed on it, kept in PyTorch as asked (on_error='eager'): {e}"
            left.extend({"op": op, "node": node.target, "reason": report.reason} for op in ops)
        else:
            report.runner = runner
            setattr(fused, node.target, runner)
        subgraphs.append(report)
    shapes = [tuple(tr.value_of(n).shape) for n in gm.graph.nodes
              if n.op == "placeholder" and isinstance(tr.value_of(n), torch.Tensor)]
    report = CompileReport(index, subgraphs, left, shapes, time.perf_counter() - start)
    return fused, report
