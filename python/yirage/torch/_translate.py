"""ATen ops to YiRage kernel-graph ops.

One function per covered ATen op builds the op's result in a yirage.KernelGraph from the kernel
graph tensors of its operands; `translate_node` dispatches on the node's target and raises
`Uncovered` with the reason when the op (or this use of it: a dtype, a rank, an argument) is
outside what the IR expresses. The partitioner calls it on every node once in a scratch graph
to decide coverage, and again for real when it builds each subgraph, so the two can never
disagree. Scalars become constant inputs of shape [1] (the IR broadcasts like NumPy), held by
the caller as NumPy arrays of the operand's dtype.
"""
import math
import operator

import ml_dtypes
import numpy as np
import torch

import yirage as yr

aten = torch.ops.aten

# The dtypes the kernel graphs take; integer and bool tensors stay in PyTorch.
DTYPES = {torch.float32: yr.float32, torch.float16: yr.float16, torch.bfloat16: yr.bfloat16}
NUMPY_DTYPES = {torch.float32: np.float32, torch.float16: np.float16,
                torch.bfloat16: ml_dtypes.bfloat16}
MAX_RANK = 4  # the IR's tensors have at most four dims


class Uncovered(Exception):
    """An op, or this use of it, that YiRage's IR does not express; the message says why."""


def value_of(node):
    """The node's example value (a FakeTensor, a tuple of them, or a Python scalar)."""
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else node


def check_tensor(value, what):
    if not isinstance(value, torch.Tensor):
        raise Uncovered(f"{what} is not a tensor")
    if value.dtype not in DTYPES:
        raise Uncovered(f"{what} has dtype {value.dtype}; kernel graphs take float32, float16, bfloat16")
    if not 1 <= value.dim() <= MAX_RANK:
        raise Uncovered(f"{what} has rank {value.dim()}; kernel graphs take 1 to {MAX_RANK} dims")
    if any(not isinstance(d, int) for d in value.shape):
        raise Uncovered(f"{what} has a symbolic shape {tuple(value.shape)}")


class Builder:
    """Builds one kernel graph: inputs by placeholder, constants as extra inputs."""

    def __init__(self):
        self.graph = yr.new_kernel_graph()
        self.constants = []  # torch tensors, in the order of their inputs after the placeholders

    def input_like(self, value, name):
        return self.graph.new_input(dims=tuple(value.shape), dtype=DTYPES[value.dtype], name=name)

    def constant(self, scalar, dtype):
        # NumPy, not torch: compiles run under dynamo's fake mode, where torch makes fake tensors.
        name = f"const{len(self.constants)}"
        self.constants.append(np.array([scalar], dtype=NUMPY_DTYPES[dtype]))
        return self.graph.new_input(dims=(1,), dtype=DTYPES[dtype], name=name)


def _shape(node):
    return tuple(value_of(node).shape)


def _binary(fn):
    def build(b, node, args):
        x, y = args[0], args[1]
        alpha = node.kwargs.get("alpha", 1)
        out_dtype = value_of(node).dtype
        if not isinstance(x, yr.Tensor):
            if fn in ("sub", "div"):
                x = b.constant(x, out_dtype)
            else:
                x, y = y, x  # commutative: the tensor first
        if not isinstance(y, yr.Tensor):
            if alpha != 1:
                y = y * alpha
            if fn == "mul":
                return b.graph.mul_scalar(x, float(y))
            if fn == "div":
                return b.graph.mul_scalar(x, 1.0 / float(y))
            y = b.constant(y, out_dtype)
        elif alpha != 1:
            y = b.graph.mul_scalar(y, float(alpha))
        if x.dtype != y.dtype:
            raise Uncovered(f"operands of {fn} have dtypes {x.dtype} and {y.dtype}")
        return getattr(b.graph, fn)(x, y)

    return build


def _rsub(b, node, args):
    x, other = args[0], args[1]
    return b.graph.sub(b.constant(other, value_of(node).dtype), x)


def _unary(fn):
    return lambda b, node, args: getattr(b.graph, fn)(args[0])


def _gelu(b, node, args):
    if node.kwargs.get("approximate", "none") != "none":
        raise Uncovered("gelu's tanh approximation is not in the IR (only the exact erf form)")
    return b.graph.gelu(args[0])


def _pow(b, node, args):
    x, exponent = args[0], args[1]
    if isinstance(exponent, yr.Tensor):
        return b.graph.pow(x, exponent)
    special = {2: b.graph.square, 0.5: b.graph.sqrt, -0.5: b.graph.rsqrt, -1: b.graph.reciprocal}
    if exponent in special:
        return special[exponent](x)
    if exponent == 1:
        return x
    return b.graph.pow(x, b.constant(exponent, value_of(node).dtype))


def _reduce(kind):
    def build(b, node, args):
        x = args[0]
        dims = args[1] if len(args) > 1 else node.kwargs.get("dim")
        keepdim = args[2] if len(args) > 2 else node.kwargs.get("keepdim", False)
        if "dtype" in node.kwargs and node.kwargs["dtype"] is not None:
            raise Uncovered(f"{kind} with a dtype argument")
        rank = len(x.shape)
        if dims is None or len(dims) == 0:
            dims = list(range(rank))
        dims = sorted({d % rank for d in ([dims] if isinstance(dims, int) else dims)})
        # Equal-sized groups: the mean of means is the mean, the max of maxes the max.
        for d in dims:
            x = b.graph.reduction(x, d, keepdim=True, kind=kind)
        return x if keepdim else b.graph.reshape(x, _shape(node))

    return build


def _matmul(b, node, args):
    return b.graph.matmul(args[0], args[1])


def _addmm(b, node, args):
    if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
        raise Uncovered("addmm with beta or alpha other than 1")
    return b.graph.add(b.graph.matmul(args[1], args[2]), args[0])


def _reshape(b, node, args):
    return b.graph.reshape(args[0], _shape(node))


def _identity(b, node, args):
    return args[0]


def _to_copy(b, node, args):
    if value_of(node).dtype != value_of(node.args[0]).dtype:
        raise Uncovered("a dtype conversion (the IR has no cast op)")
    return args[0]


def _t(b, node, args):
    return args[0] if len(args[0].shape) < 2 else b.graph.transpose(args[0], 0, 1)


def _transpose(b, node, args):
    return b.graph.transpose(args[0], args[1], args[2])


def _permute(b, node, args):
    return b.graph.permute(args[0], list(args[1]))


def _expand(b, node, args):
    x, out = args[0], _shape(node)
    if tuple(x.shape) == out:
        return x
    lead = (1,) * (len(out) - len(x.shape))
    x = b.graph.reshape(x, lead + tuple(x.shape)) if lead else x
    for d, (have, want) in enumerate(zip(x.shape, out)):
        if have != want:
            if want > 64:
                raise Uncovered(f"expand of dim {d} to {want} copies (at most 64 as a concat)")
            x = b.graph.concat([x] * want, d)
    return x


def _softmax(b, node, args):
    if len(args) > 2 and args[2]:
        raise Uncovered("softmax with half_to_float")
    return b.graph.softmax(args[0], args[1])


def _layer_norm(b, node, args):
    x, shape = args[0], list(args[1])
    weight = args[2] if len(args) > 2 else None
    bias = args[3] if len(args) > 3 else None
    eps = args[4] if len(args) > 4 else 1e-5
    out = b.graph.layer_norm(x, normalized_shape=shape, weight=weight, bias=bias, eps=eps)
    return [out, None, None]  # mean and rstd are not computed: only getitem 0 is covered


def _cat(b, node, args):
    tensors = [t for t, v in zip(args[0], node.args[0]) if value_of(v).numel() > 0]
    dim = args[1] if len(args) > 1 else node.kwargs.get("dim", 0)
    if len(tensors) == 1:
        return tensors[0]
    return b.graph.concat(tensors, dim)


def _split_with_sizes(b, node, args):
    x, sizes = args[0], list(args[1])
    dim = args[2] if len(args) > 2 else node.kwargs.get("dim", 0)
    return b.graph.split(x, dim % len(x.shape), sizes)


def _split(b, node, args):
    x, size = args[0], args[1]
    dim = (args[2] if len(args) > 2 else node.kwargs.get("dim", 0)) % len(x.shape)
    extent = x.shape[dim]
    sizes = [min(size, extent - start) for start in range(0, extent, size)]
    return b.graph.split(x, dim, sizes) if len(sizes) > 1 else [x]


def _slice(b, node, args):
    x = args[0]
    dim = (args[1] if len(args) > 1 else 0) % len(x.shape)
    extent = x.shape[dim]
    start = args[2] if len(args) > 2 and args[2] is not None else 0
    end = args[3] if len(args) > 3 and args[3] is not None else extent
    step = args[4] if len(args) > 4 else 1
    if step != 1:
        raise Uncovered(f"slice with step {step}")
    start, end = max(0, min(start + extent if start < 0 else start, extent)), end
    end = max(start, min(end + extent if end < 0 else end, extent))
    if start == 0 and end == extent:
        return x
    if start == end:
        raise Uncovered("an empty slice")
    sizes = [s for s in (start, end - start, extent - end) if s > 0]
    return b.graph.split(x, dim, sizes)[1 if start > 0 else 0]


def _getitem(b, node, args):
    parts, index = args[0], args[1]
    if not isinstance(parts, (list, tuple)) or parts[index] is None:
        raise Uncovered(f"output {index} of {node.args[0].target}")
    return parts[index]


def _sdpa(b, node, args):
    q, k, v = args[0], args[1], args[2]
    dropout = args[3] if len(args) > 3 else node.kwargs.get("dropout_p", 0.0)
    causal = args[4] if len(args) > 4 else node.kwargs.get("is_causal", False)
    if dropout or causal or node.kwargs.get("attn_mask") is not None:
        raise Uncovered("scaled_dot_product_attention with dropout, is_causal or attn_mask")
    if q.shape[:-2] != k.shape[:-2]:
        raise Uncovered("scaled_dot_product_attention with grouped heads (enable_gqa)")
    scale = node.kwargs.get("scale") or 1.0 / math.sqrt(q.shape[-1])
    scores = b.graph.mul_scalar(b.graph.matmul(q, b.graph.transpose(k, -2, -1)), scale)
    return [b.graph.matmul(b.graph.softmax(scores, -1), v), None]


OPS = {
    aten.mm.default: _matmul,
    aten.bmm.default: _matmul,
    aten.matmul.default: _matmul,
    aten.addmm.default: _addmm,
    aten.add.Tensor: _binary("add"),
    aten.add.Scalar: _binary("add"),
    aten.sub.Tensor: _binary("sub"),
    aten.sub.Scalar: _binary("sub"),
    aten.mul.Tensor: _binary("mul"),
    aten.mul.Scalar: _binary("mul"),
    aten.div.Tensor: _binary("div"),
    aten.div.Scalar: _binary("div"),
    aten.rsub.Scalar: _rsub,
    aten.exp.default: _unary("exp"),
    aten.silu.default: _unary("silu"),
    aten.relu.default: _unary("relu"),
    aten.sqrt.default: _unary("sqrt"),
    aten.rsqrt.default: _unary("rsqrt"),
    aten.neg.default: _unary("neg"),
    aten.reciprocal.default: _unary("reciprocal"),
    aten.gelu.default: _gelu,
    aten.pow.Tensor_Scalar: _pow,
    aten.pow.Tensor_Tensor: _pow,
    aten.sum.dim_IntList: _reduce("sum"),
    aten.mean.dim: _reduce("mean"),
    aten.amax.default: _reduce("max"),
    aten._softmax.default: _softmax,
    aten.native_layer_norm.default: _layer_norm,
    aten.cat.default: _cat,
    aten.split_with_sizes.default: _split_with_sizes,
    aten.split.Tensor: _split,
    aten.slice.Tensor: _slice,
    aten.view.default: _reshape,
    aten._unsafe_view.default: _reshape,
    aten.reshape.default: _reshape,
    aten.unsqueeze.default: _reshape,
    aten.squeeze.dim: _reshape,
    aten.squeeze.dims: _reshape,
    aten.t.default: _t,
    aten.transpose.int: _transpose,
    aten.permute.default: _permute,
    aten.expand.default: _expand,
    aten.clone.default: _identity,
    aten.alias.default: _identity,
    aten._to_copy.default: _to_copy,
    aten._scaled_dot_product_flash_attention_for_cpu.default: _sdpa,
    operator.getitem: _getitem,
}

# Ops that only rearrange or pass data on: a subgraph of these alone computes nothing and would
# only add a copy, so it stays in PyTorch.
LAYOUT_OPS = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.t.default, aten.transpose.int,
    aten.permute.default, aten.expand.default, aten.clone.default, aten.alias.default,
    aten._to_copy.default, aten.slice.Tensor, aten.cat.default, aten.split.Tensor,
    aten.split_with_sizes.default, operator.getitem,
}


def op_name(node):
    target = node.target
    if target is operator.getitem:
        return "getitem"
    return str(target) if not hasattr(target, "name") else f"aten.{target.name().split('::')[-1]}"


def _check_outputs(node):
    if node.target is operator.getitem:
        return
    value = value_of(node)
    if isinstance(value, (tuple, list)):
        value = value[0]  # the other results of multi-result ops have the same dtype
    check_tensor(value, "the result")


def translate_node(builder, node, env):
    """Adds `node` to builder's graph given `env` (FX node -> kernel graph tensor, or list of
    them); returns its kernel graph tensor(s). Raises Uncovered with the reason."""
    build = OPS.get(node.target)
    if build is None:
        raise Uncovered("not in YiRage's IR")
    _check_outputs(node)

    def arg(a):
        if isinstance(a, torch.fx.Node):
            if a not in env:
                raise Uncovered(f"operand {a.name} is not a kernel-graph tensor")
            return env[a]
        if isinstance(a, (list, tuple)):
            return [arg(x) for x in a]
        return a

    args = [arg(a) for a in node.args]
    try:
        return build(builder, node, args)
    except yr.Error as e:
        raise Uncovered(str(e)) from None
    except (TypeError, IndexError) as e:
        raise Uncovered(f"unexpected arguments ({e})") from None


def _is_kernel_tensor(value):
    try:
        check_tensor(value, "")
        return True
    except Uncovered:
        return False


# Ops of several results of which the kernel graph computes only the first.
FIRST_RESULT_ONLY = {aten.native_layer_norm.default,
                     aten._scaled_dot_product_flash_attention_for_cpu.default}


def scratch_translate(node, builder=None, env=None):
    """Translates node into a scratch graph (a new one, or `builder`'s), its tensor operands not
    in `env` becoming inputs: raises Uncovered when it can't be."""
    builder = builder or Builder()
    env = {} if env is None else env
    for operand in node.all_input_nodes:
        if operand in env:
            continue
        value = value_of(operand)
        if isinstance(value, (tuple, list)):
            first_only = operand.target in FIRST_RESULT_ONLY
            env[operand] = [
                builder.input_like(v, f"{operand.name}_{j}")
                if (j == 0 or not first_only) and _is_kernel_tensor(v) else None
                for j, v in enumerate(value)]
            continue
        check_tensor(value, f"operand {operand.name}")
        env[operand] = builder.input_like(value, operand.name)
    env[node] = translate_node(builder, node, env)


# The search takes kernel graphs of at most this many nodes (inputs included).
SEARCH_MAX_NODES = 64


def split_to_fit(nodes, max_nodes=SEARCH_MAX_NODES):
    """Cuts a partition's nodes (in topological order) into consecutive runs whose kernel graphs
    have at most max_nodes nodes. Consecutive runs of a convex partition are convex and form no
    cycle among themselves (every edge goes forward in the order). A tuple's getitems follow
    their producer into its run, so no run hands another a tuple."""
    members = set(nodes)
    ordered, placed = [], set()
    for n in nodes:
        if n in placed:
            continue
        ordered.append(n)
        placed.add(n)
        for user in n.users:
            if user.target is operator.getitem and user in members and user not in placed:
                ordered.append(user)
                placed.add(user)
    runs, run, builder, env = [], [], Builder(), {}
    for n in ordered:
        scratch_translate(n, builder, env)
        if len(builder.graph) > max_nodes and run and n.target is not operator.getitem:
            runs.append(run)
            run, builder, env = [], Builder(), {}
            scratch_translate(n, builder, env)
        run.append(n)
    if run:
        runs.append(run)
    return runs
