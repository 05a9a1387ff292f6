"""The reference executor against NumPy, on random inputs, for every op in every float dtype.

Each case writes a kernel graph as JSON and its inputs as .npy files, runs
`yirage run GRAPH --inputs DIR --save OUT`, and compares every saved output with NumPy's result
computed in float64 from the same (already rounded) inputs. The executor computes in double and
rounds each result once, so an output may be off by at most half an ulp of its dtype; the
tolerance allows one ulp, plus a 1e-12 share of the terms' magnitude for cancellation in sums.
Shape ops, embedding and split move values without arithmetic and must match exactly.
"""
import json
import math
import subprocess
import zlib

import numpy as np
import pytest

FLOAT_DTYPES = ["f32", "f16", "bf16"]

# One ulp at 1.0, relative: twice the worst relative rounding error of a correctly rounded result.
ULP = {"f32": 2.0**-23, "f16": 2.0**-10, "bf16": 2.0**-7}
# f16 subnormals are 2^-24 apart, which no relative tolerance covers near zero.
TINY = {"f32": 1e-38, "f16": 2.0**-24, "bf16": 1e-38}
# How `yirage run --save` writes each dtype (bf16 is widened, losslessly, to float32).
SAVED_DESCR = {"f32": "<f4", "f16": "<f2", "bf16": "<f4", "i32": "<i4"}


# ---- values ---------------------------------------------------------------------------------

def to_bf16(values: np.ndarray) -> np.ndarray:
    """Rounds to the nearest bfloat16 (ties to even), returned as exactly representable float32."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def quantize(values: np.ndarray, dtype: str) -> np.ndarray:
    """`values` rounded to `dtype`, as the array `yirage run` takes for an input of that dtype."""
    if dtype == "f32":
        return np.asarray(values, np.float32)
    if dtype == "f16":
        return np.asarray(values, np.float16)
    if dtype == "bf16":
        return to_bf16(values)
    if dtype == "i32":
        return np.asarray(values, np.int32)
    raise ValueError(dtype)


def rng_for(*key) -> np.random.Generator:
    """A fixed seed per case that differs between cases."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def uniform(rng, shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape)


def away_from_zero(rng, shape, lo=0.5, hi=2.0):
    """Magnitudes in [lo, hi) with random signs: safe divisors."""
    return rng.uniform(lo, hi, size=shape) * rng.choice([-1.0, 1.0], size=shape)


# ---- graphs ---------------------------------------------------------------------------------

class Graph:
    """A kernel graph in its JSON form, with the input arrays to run it on."""

    def __init__(self):
        self.nodes = []
        self.outputs = []
        self.arrays = {}  # input name -> array as written to the .npy file
        self.dtypes = {}  # output name -> dtype

    def input(self, name: str, dtype: str, values) -> np.ndarray:
        """Adds an input and returns its values in float64 (int64 for ids), as NumPy sees them."""
        array = quantize(values, dtype)
        self.nodes.append({"name": name, "op": "input", "dtype": dtype, "shape": list(array.shape)})
        self.arrays[name] = array
        return array.astype(np.int64 if dtype == "i32" else np.float64)

    def op(self, name: str, op: str, inputs: list, **attributes) -> str:
        self.nodes.append({"name": name, "op": op, "inputs": inputs, **attributes})
        return name

    def output(self, tensor: str, dtype: str, name: str = None):
        name = name or tensor
        self.outputs.append({"tensor": tensor, "name": name})
        self.dtypes[name] = dtype

    def to_json(self) -> dict:
        return {"schema": "yirage.kernel_graph", "version": 1, "nodes": self.nodes,
                "outputs": self.outputs}


def run(yirage_bin: str, tmp_path, graph: Graph) -> dict:
    """Runs the graph with `yirage run` and returns its saved outputs by name."""
    graph_path = tmp_path / "graph.json"
    graph_path.write_text(json.dumps(graph.to_json(), indent=1))
    input_dir = tmp_path / "inputs"
    output_dir = tmp_path / "outputs"
    input_dir.mkdir()
    for name, array in graph.arrays.items():
        np.save(input_dir / f"{name}.npy", array)
    # The reference executor is what this suite checks, whatever "auto" picks on this machine.
    result = subprocess.run([yirage_bin, "run", str(graph_path), "--backend", "reference",
                             "--inputs", str(input_dir), "--save", str(output_dir)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (
        f"yirage run failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    outputs = {}
    for name, dtype in graph.dtypes.items():
        array = np.load(output_dir / f"{name}.npy")
        assert array.dtype.str == SAVED_DESCR[dtype], (
            f"output {name!r} of dtype {dtype} saved as {array.dtype.str}")
        if dtype == "bf16":
            assert np.array_equal(to_bf16(array), array, equal_nan=True), (
                f"bf16 output {name!r} holds values that are not bf16")
        outputs[name] = array
    return outputs


# ---- comparison -----------------------------------------------------------------------------

def assert_close(name: str, got: np.ndarray, expected: np.ndarray, dtype: str, scale=1.0):
    """`got` is `expected` rounded once to `dtype`, up to one ulp. `scale` is the magnitude of
    the terms summed into each element, for the double-precision rounding of cancelling sums."""
    expected = np.asarray(expected, np.float64)
    assert got.shape == expected.shape, f"{name}: shape {got.shape}, expected {expected.shape}"
    got = got.astype(np.float64)
    tolerance = ULP[dtype] * np.abs(expected) + TINY[dtype] + 1e-12 * np.broadcast_to(
        np.asarray(scale, np.float64), expected.shape)
    bad = ~(np.abs(got - expected) <= tolerance)  # NaN counts as bad
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(
            f"{name} [{dtype}]: {int(bad.sum())} of {bad.size} elements off; first at {first}: "
            f"got {got[first]!r}, expected {expected[first]!r}, tolerance {tolerance[first]:.3g}")


def assert_exact(name: str, got: np.ndarray, expected: np.ndarray):
    expected = np.asarray(expected)
    assert got.shape == expected.shape, f"{name}: shape {got.shape}, expected {expected.shape}"
    mismatch = got.astype(np.float64) != expected.astype(np.float64)
    assert not mismatch.any(), (
        f"{name}: {int(mismatch.sum())} of {mismatch.size} elements differ; first at "
        f"{tuple(np.argwhere(mismatch)[0])}")


# ---- elementwise ----------------------------------------------------------------------------

erf = np.vectorize(math.erf)

# op name -> (input generator, float64 reference)
UNARY = {
    "exp": (lambda rng, s: uniform(rng, s, -3, 3), np.exp),
    "silu": (lambda rng, s: uniform(rng, s, -6, 6), lambda x: x / (1 + np.exp(-x))),
    "gelu": (lambda rng, s: uniform(rng, s, -4, 4), lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2)))),
    "relu": (lambda rng, s: uniform(rng, s), lambda x: np.maximum(x, 0)),
    "sqrt": (lambda rng, s: uniform(rng, s, 0, 4), np.sqrt),
    "rsqrt": (lambda rng, s: uniform(rng, s, 0.05, 4), lambda x: 1 / np.sqrt(x)),
    "square": (lambda rng, s: uniform(rng, s, -3, 3), np.square),
    "neg": (lambda rng, s: uniform(rng, s), np.negative),
    "reciprocal": (away_from_zero, np.reciprocal),
    "mul_scalar": (lambda rng, s: uniform(rng, s, -3, 3), lambda x: x * -1.7),
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op", list(UNARY))
def test_unary(yirage_bin, tmp_path, op, dtype):
    make, reference = UNARY[op]
    rng = rng_for("unary", op, dtype)
    g = Graph()
    x = g.input("x", dtype, make(rng, (3, 4, 5)))
    g.output(g.op("y", op, ["x"], **({"scalar": -1.7} if op == "mul_scalar" else {})), dtype)
    assert_close(op, run(yirage_bin, tmp_path, g)["y"], reference(x), dtype)


# Operand shape pairs that exercise NumPy broadcasting: equal shapes, size-1 dims on either side,
# rank mismatch in both directions, and a single element against a rank-3 tensor.
BROADCAST_SHAPES = [
    ((3, 4), (3, 4)),
    ((4, 1, 3), (5, 1)),
    ((1,), (2, 3, 4)),
    ((2, 3, 4), (1,)),
    ((2, 1, 4), (1, 3, 1)),
    ((3,), (2, 3)),
    ((2, 1, 3, 1), (4, 1, 5)),
]

BINARY = {
    "add": (uniform, uniform, np.add),
    "sub": (uniform, uniform, np.subtract),
    "mul": (lambda rng, s: uniform(rng, s, -3, 3), lambda rng, s: uniform(rng, s, -3, 3), np.multiply),
    "div": (uniform, away_from_zero, np.divide),
    "pow": (lambda rng, s: uniform(rng, s, 0.25, 3), lambda rng, s: uniform(rng, s, -3, 3), np.power),
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_broadcasting(yirage_bin, tmp_path, op, dtype):
    make_a, make_b, reference = BINARY[op]
    rng = rng_for("binary", op, dtype)
    g = Graph()
    expected = {}
    for i, (shape_a, shape_b) in enumerate(BROADCAST_SHAPES):
        a = g.input(f"a{i}", dtype, make_a(rng, shape_a))
        b = g.input(f"b{i}", dtype, make_b(rng, shape_b))
        g.output(g.op(f"y{i}", op, [f"a{i}", f"b{i}"]), dtype)
        expected[f"y{i}"] = reference(a, b)
    outputs = run(yirage_bin, tmp_path, g)
    for i, (shape_a, shape_b) in enumerate(BROADCAST_SHAPES):
        assert_close(f"{op} {shape_a} with {shape_b}", outputs[f"y{i}"], expected[f"y{i}"], dtype)


# ---- matmul ---------------------------------------------------------------------------------

MATMUL_SHAPES = [
    ((3, 5), (5, 4)),
    ((4, 64), (64, 3)),  # a longer accumulation
    ((2, 3, 5), (5, 4)),  # rank mismatch: b is shared by the batch
    ((3, 5), (2, 5, 4)),
    ((2, 1, 3, 5), (3, 5, 4)),  # batch [2, 1] with [3] -> [2, 3]
    ((1, 3, 5), (2, 5, 4)),
    ((2, 2, 3, 5), (2, 2, 5, 1)),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_matmul(yirage_bin, tmp_path, dtype):
    rng = rng_for("matmul", dtype)
    g = Graph()
    expected = {}
    for i, (shape_a, shape_b) in enumerate(MATMUL_SHAPES):
        a = g.input(f"a{i}", dtype, uniform(rng, shape_a))
        b = g.input(f"b{i}", dtype, uniform(rng, shape_b))
        g.output(g.op(f"y{i}", "matmul", [f"a{i}", f"b{i}"]), dtype)
        expected[f"y{i}"] = (np.matmul(a, b), np.matmul(np.abs(a), np.abs(b)))
    outputs = run(yirage_bin, tmp_path, g)
    for i, (shape_a, shape_b) in enumerate(MATMUL_SHAPES):
        value, scale = expected[f"y{i}"]
        assert_close(f"matmul {shape_a} x {shape_b}", outputs[f"y{i}"], value, dtype, scale)


# ---- reductions, norms, softmax -------------------------------------------------------------

REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max}
# (input shape, dim, keepdim)
REDUCE_CASES = [((3, 4, 5), 0, True), ((3, 4, 5), 1, False), ((3, 4, 5), -1, True),
                ((2, 3, 4, 5), 2, False), ((7,), 0, True), ((6, 40), 1, False)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op", list(REDUCE))
def test_reduce(yirage_bin, tmp_path, op, dtype):
    rng = rng_for("reduce", op, dtype)
    g = Graph()
    expected = {}
    for i, (shape, dim, keepdim) in enumerate(REDUCE_CASES):
        x = g.input(f"x{i}", dtype, uniform(rng, shape, -2, 2))
        g.output(g.op(f"y{i}", op, [f"x{i}"], dim=dim, keepdim=keepdim), dtype)
        expected[f"y{i}"] = (REDUCE[op](x, axis=dim, keepdims=keepdim),
                             np.sum(np.abs(x), axis=dim, keepdims=keepdim))
    outputs = run(yirage_bin, tmp_path, g)
    for i, (shape, dim, keepdim) in enumerate(REDUCE_CASES):
        value, scale = expected[f"y{i}"]
        assert_close(f"{op} {shape} dim {dim} keepdim {keepdim}", outputs[f"y{i}"], value, dtype,
                     scale)


def trailing_axes(normalized_shape):
    return tuple(range(-len(normalized_shape), 0))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_rms_norm(yirage_bin, tmp_path, dtype):
    rng = rng_for("rms_norm", dtype)
    g = Graph()
    x = g.input("x", dtype, uniform(rng, (2, 3, 8), -2, 2))
    w8 = g.input("w8", dtype, uniform(rng, (8,), 0.5, 1.5))
    cases = {  # output -> (normalized_shape, eps, weight)
        "weighted": ([8], 1e-6, w8),
        "plain": ([8], 1e-6, None),
        "two_dims": ([3, 8], 0.25, None),
    }
    for name, (shape, eps, weight) in cases.items():
        inputs = ["x"] + (["w8"] if weight is not None else [])
        g.output(g.op(name, "rms_norm", inputs, normalized_shape=shape, eps=eps,
                      has_weight=weight is not None), dtype)
    outputs = run(yirage_bin, tmp_path, g)
    for name, (shape, eps, weight) in cases.items():
        mean_square = np.mean(x * x, axis=trailing_axes(shape), keepdims=True)
        y = x / np.sqrt(mean_square + eps)
        if weight is not None:
            y = y * weight
        assert_close(f"rms_norm {name}", outputs[name], y, dtype, np.abs(y))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_layer_norm(yirage_bin, tmp_path, dtype):
    rng = rng_for("layer_norm", dtype)
    g = Graph()
    x = g.input("x", dtype, uniform(rng, (2, 3, 8), -2, 3))
    w = g.input("w", dtype, uniform(rng, (3, 8), 0.5, 1.5))
    b = g.input("b", dtype, uniform(rng, (3, 8)))
    w8 = g.input("w8", dtype, uniform(rng, (8,), 0.5, 1.5))
    b8 = g.input("b8", dtype, uniform(rng, (8,)))
    cases = {  # output -> (normalized_shape, eps, weight, bias)
        "affine": ([3, 8], 1e-5, ("w", w), ("b", b)),
        "plain": ([8], 1e-5, None, None),
        "weight_only": ([8], 0.1, ("w8", w8), None),
        "bias_only": ([8], 1e-5, None, ("b8", b8)),
    }
    for name, (shape, eps, weight, bias) in cases.items():
        inputs = ["x"] + [p[0] for p in (weight, bias) if p is not None]
        g.output(g.op(name, "layer_norm", inputs, normalized_shape=shape, eps=eps,
                      has_weight=weight is not None, has_bias=bias is not None), dtype)
    outputs = run(yirage_bin, tmp_path, g)
    for name, (shape, eps, weight, bias) in cases.items():
        axes = trailing_axes(shape)
        centred = x - np.mean(x, axis=axes, keepdims=True)
        y = centred / np.sqrt(np.mean(centred * centred, axis=axes, keepdims=True) + eps)
        if weight is not None:
            y = y * weight[1]
        if bias is not None:
            y = y + bias[1]
        assert_close(f"layer_norm {name}", outputs[name], y, dtype, np.abs(y) + 1)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_softmax(yirage_bin, tmp_path, dtype):
    rng = rng_for("softmax", dtype)
    g = Graph()
    x = g.input("x", dtype, uniform(rng, (3, 4, 5), -3, 3))
    # exp of these overflows even a double: only a max-subtracting softmax gets them right.
    big = g.input("big", dtype, uniform(rng, (2, 6), 1000, 1020))
    cases = {"d0": ("x", x, 0), "d1": ("x", x, 1), "dlast": ("x", x, -1), "y_big": ("big", big, -1)}
    for name, (operand, _, dim) in cases.items():
        g.output(g.op(name, "softmax", [operand], dim=dim), dtype)
    outputs = run(yirage_bin, tmp_path, g)
    for name, (_, values, dim) in cases.items():
        e = np.exp(values - np.max(values, axis=dim, keepdims=True))
        assert_close(f"softmax {name}", outputs[name], e / np.sum(e, axis=dim, keepdims=True),
                     dtype)


# ---- shape ops and lookups: exact -----------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_concat(yirage_bin, tmp_path, dtype):
    rng = rng_for("concat", dtype)
    g = Graph()
    a = g.input("a", dtype, uniform(rng, (2, 3, 4)))
    b = g.input("b", dtype, uniform(rng, (2, 1, 4)))
    c = g.input("c", dtype, uniform(rng, (2, 5, 4)))
    d = g.input("d", dtype, uniform(rng, (2, 3, 2)))
    g.output(g.op("mid", "concat", ["a", "b", "c"], dim=1), dtype)
    g.output(g.op("last", "concat", ["a", "d"], dim=-1), dtype)
    g.output(g.op("first", "concat", ["a", "a"], dim=0), dtype)
    outputs = run(yirage_bin, tmp_path, g)
    assert_exact("concat dim 1", outputs["mid"], np.concatenate([a, b, c], axis=1))
    assert_exact("concat dim -1", outputs["last"], np.concatenate([a, d], axis=-1))
    assert_exact("concat dim 0", outputs["first"], np.concatenate([a, a], axis=0))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_split(yirage_bin, tmp_path, dtype):
    rng = rng_for("split", dtype)
    g = Graph()
    x = g.input("x", dtype, uniform(rng, (2, 6, 4)))
    g.op("parts", "split", ["x"], dim=1, sizes=[1, 3, 2])
    g.op("halves", "split", ["x"], dim=-1, sizes=[2, 2])
    for port in range(3):
        g.output(f"parts:{port}", dtype, f"part{port}")
    g.output("halves:1", dtype, "right")
    outputs = run(yirage_bin, tmp_path, g)
    for port, expected in enumerate(np.split(x, [1, 4], axis=1)):
        assert_exact(f"split part {port}", outputs[f"part{port}"], expected)
    assert_exact("split last dim", outputs["right"], x[..., 2:])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_reshape_and_permute(yirage_bin, tmp_path, dtype):
    rng = rng_for("reshape_permute", dtype)
    g = Graph()
    x = g.input("x", dtype, uniform(rng, (2, 3, 4, 5)))
    g.output(g.op("flat", "reshape", ["x"], shape=[6, 20]), dtype)
    g.output(g.op("inferred", "reshape", ["x"], shape=[4, -1, 3]), dtype)
    g.output(g.op("perm", "permute", ["x"], perm=[3, 1, 0, 2]), dtype)
    g.output(g.op("swap", "permute", ["x"], perm=[0, 2, 1, 3]), dtype)
    outputs = run(yirage_bin, tmp_path, g)
    assert_exact("reshape [6, 20]", outputs["flat"], x.reshape(6, 20))
    assert_exact("reshape [4, -1, 3]", outputs["inferred"], x.reshape(4, -1, 3))
    assert_exact("permute [3, 1, 0, 2]", outputs["perm"], np.transpose(x, (3, 1, 0, 2)))
    assert_exact("permute [0, 2, 1, 3]", outputs["swap"], np.transpose(x, (0, 2, 1, 3)))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_embedding(yirage_bin, tmp_path, dtype):
    rng = rng_for("embedding", dtype)
    g = Graph()
    table = g.input("table", dtype, uniform(rng, (11, 6)))
    cases = {"ids1": (7,), "ids2": (2, 3), "ids3": (2, 2, 2)}
    ids = {name: g.input(name, "i32", rng.integers(0, 11, size=shape))
           for name, shape in cases.items()}
    for name in cases:
        g.output(g.op(f"rows_{name}", "embedding", ["table", name]), dtype)
    outputs = run(yirage_bin, tmp_path, g)
    for name in cases:
        assert_exact(f"embedding {cases[name]}", outputs[f"rows_{name}"], table[ids[name]])


def rope_reference(x, positions, theta, style):
    """x [..., S, H, D], positions [S]: rotates each pair (a, b) by pos * theta^(-2i/D)."""
    head_dim = x.shape[-1]
    half = head_dim // 2
    pair = np.arange(half)
    angle = positions[:, None].astype(np.float64) * theta ** (-2.0 * pair / head_dim)  # [S, D/2]
    cos = np.cos(angle)[:, None, :]  # broadcast over heads
    sin = np.sin(angle)[:, None, :]
    if style == "interleaved":
        first, second = 2 * pair, 2 * pair + 1
    else:
        first, second = pair, pair + half
    a, b = x[..., first], x[..., second]
    out = np.empty_like(x)
    out[..., first] = a * cos - b * sin
    out[..., second] = a * sin + b * cos
    return out


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("style", ["interleaved", "neox"])
def test_rope(yirage_bin, tmp_path, style, dtype):
    rng = rng_for("rope", style, dtype)
    g = Graph()
    x = g.input("x", dtype, uniform(rng, (2, 5, 3, 8), -2, 2))  # batch, seq, heads, head_dim
    x3 = g.input("x3", dtype, uniform(rng, (4, 2, 6), -2, 2))  # no batch dim
    pos = g.input("pos", "i32", rng.integers(0, 200, size=5))
    pos3 = g.input("pos3", "i32", rng.permutation(4))
    g.output(g.op("y", "rope", ["x", "pos"], theta=10000.0, style=style), dtype)
    g.output(g.op("y3", "rope", ["x3", "pos3"], theta=500.0, style=style), dtype)
    outputs = run(yirage_bin, tmp_path, g)
    for name, values, positions, theta in (("y", x, pos, 10000.0), ("y3", x3, pos3, 500.0)):
        expected = rope_reference(values, positions, theta, style)
        assert_close(f"rope {style} {name}", outputs[name], expected, dtype,
                     2 * np.max(np.abs(values)))


# ---- errors through the CLI -----------------------------------------------------------------

def test_embedding_id_out_of_range_is_reported(yirage_bin, tmp_path):
    g = Graph()
    g.input("table", "f32", np.zeros((4, 2)))
    g.input("ids", "i32", np.array([[0, 1], [4, 2]]))
    g.output(g.op("tok_embed", "embedding", ["table", "ids"]), "f32")
    (tmp_path / "inputs").mkdir()
    for name, array in g.arrays.items():
        np.save(tmp_path / "inputs" / f"{name}.npy", array)
    (tmp_path / "graph.json").write_text(json.dumps(g.to_json()))
    result = subprocess.run([yirage_bin, "run", str(tmp_path / "graph.json"), "--backend",
                             "reference", "--inputs", str(tmp_path / "inputs"), "--save",
                             str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "tok_embed" in result.stderr and "ids[1, 0] = 4" in result.stderr, result.stderr
