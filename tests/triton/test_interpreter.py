"""Every Triton kernel YiRage generates for the suite, and for the µGraphs the search returns for
it, run under Triton's interpreter (TRITON_INTERPRET=1, NumPy only) and checked against the
reference executor on the same random inputs, outputs poisoned first, tolerances by dtype.

The search runs under the cpu backend's description: the triton backend describes a search space
only where it finds a GPU, and CI has none. Its µGraphs are µGraphs all the same, and the Triton
generator must lower any valid one.
"""
import json
import pathlib
import subprocess

import numpy as np
import pytest

from interpret import run_program

WORKLOADS = ["rmsnorm_linear", "gated_mlp", "gqa", "lora", "ntrans", "gemm_softmax",
             "gemm_layernorm", "llama_mlp_block"]

# Relative to the output's largest magnitude: the kernels sum in another order than the
# reference (tiles, then iterations), and 16-bit outputs round once more where an intermediate
# crossed a kernel boundary.
TOLERANCE = {"f32": 1e-4, "f16": 4e-3, "bf16": 3e-2}


def yirage(yirage_bin, *args):
    result = subprocess.run([yirage_bin, *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def to_bf16_bits(values):
    """float32 -> bfloat16 bits, rounding to nearest even, as yirage narrows f32 .npy inputs."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def make_inputs(graph, folder, seed, scale):
    """Random inputs for the graph's input nodes, written as .npy for `yirage run`: float values
    uniform in [-scale, scale), as the dtype holds them."""
    rng = np.random.default_rng(seed)
    folder.mkdir()
    arrays = []
    for node in graph["nodes"]:
        if node["op"] != "input":
            continue
        values = rng.uniform(-scale, scale, node["shape"]).astype(np.float32)
        dtype = node["dtype"]
        if dtype == "f16":
            values = values.astype(np.float16)
        elif dtype == "bf16":
            arrays.append(to_bf16_bits(values))
            np.save(folder / f"{node['name']}.npy", from_bf16_bits(arrays[-1]))
            continue
        elif dtype != "f32":
            pytest.fail(f"input {node['name']}: no random inputs for {dtype}")
        arrays.append(values)
        np.save(folder / f"{node['name']}.npy", values)
    return arrays


def check_graph(yirage_bin, graph_path, tmp_path, seed=1, scale=1.0):
    """Runs the graph's generated kernels under the interpreter and compares every output with
    the reference backend's; returns the number of kernels run."""
    program_path = tmp_path / "program.json"
    yirage(yirage_bin, "graph", "source", str(graph_path), "--backend", "triton",
           "-o", str(program_path))
    program = json.loads(program_path.read_text())
    graph = json.loads(pathlib.Path(graph_path).read_text())
    inputs = make_inputs(graph, tmp_path / "inputs", seed, scale)
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    outputs = run_program(program, inputs, kernels)
    yirage(yirage_bin, "run", str(graph_path), "--backend", "reference",
           "--inputs", str(tmp_path / "inputs"), "--save", str(tmp_path / "reference"))
    output_slots = sorted((s["index"], s) for s in program["slots"] if s["kind"] == "output")
    for (_, slot), spec, got in zip(output_slots, graph["outputs"], outputs):
        expected = np.load(tmp_path / "reference" / f"{spec['name']}.npy").astype(np.float64)
        got = from_bf16_bits(got) if slot["dtype"] == "bf16" else got
        got = got.astype(np.float64)
        assert got.shape == expected.shape, spec["name"]
        assert np.isfinite(got).all(), f"{spec['name']}: not every element written or finite"
        scale_of = max(np.abs(expected).max(), 1e-30)
        error = np.abs(got - expected).max() / scale_of
        assert error <= TOLERANCE[slot["dtype"]], (
            f"{graph_path}: output {spec['name']} off by {error:.3g} of its largest magnitude")
    return len(program["kernels"])


@pytest.mark.parametrize("workload", WORKLOADS)
def test_suite_workload_runs_as_generated(yirage_bin, source_dir, tmp_path, workload):
    assert check_graph(yirage_bin, source_dir / "examples" / f"{workload}.json", tmp_path) >= 1


@pytest.mark.parametrize("workload", WORKLOADS)
def test_search_outputs_run_as_generated(yirage_bin, source_dir, tmp_path, workload):
    result = json.loads(yirage(yirage_bin, "optimize", str(source_dir / "examples" /
                                                             f"{workload}.json"),
                               "--backend", "cpu", "--no-tune", "--json", "--budget", "5"))
    # Those without a fused node are the workload's own graph, which the test above runs.
    mugraphs = []
    for candidate in result["ranked"]:
        mugraph = candidate["mugraph"]
        if mugraph not in mugraphs and any(n["op"] == "fused" for n in mugraph["nodes"]):
            mugraphs.append(mugraph)
    assert mugraphs, f"{workload}: the search returned no fused µGraph to run"
    for i, mugraph in enumerate(mugraphs):
        folder = tmp_path / f"candidate{i}"
        folder.mkdir()
        (folder / "mugraph.json").write_text(json.dumps(mugraph))
        check_graph(yirage_bin, folder / "mugraph.json", folder)


def mixed_graph(dtype):
    """Extents that are no powers of two (every tile padded and masked), each op kind the
    generator has, and 16-bit storage where asked."""
    def node(name, op, inputs, **attributes):
        return {"name": name, "op": op, "inputs": inputs, **attributes}
    nodes = [
        {"name": "x", "op": "input", "dtype": dtype, "shape": [24, 80]},
        {"name": "g", "op": "input", "dtype": dtype, "shape": [80]},
        {"name": "b", "op": "input", "dtype": dtype, "shape": [80]},
        {"name": "w", "op": "input", "dtype": dtype, "shape": [80, 48]},
        node("normed", "rms_norm", ["x", "g"], normalized_shape=[80], has_weight=True),
        node("mixed", "matmul", ["normed", "w"]),
        node("gate", "gelu", ["mixed"]),
        node("probs", "softmax", ["gate"], dim=-1),
        node("ln", "layer_norm", ["x", "g", "b"], normalized_shape=[80], has_weight=True,
             has_bias=True),
        node("col_max", "max", ["x"], dim=0, keepdim=False),
        node("row_mean", "mean", ["x"], dim=-1),
        node("halves", "split", ["x"], dim=1, sizes=[30, 50]),
        node("flipped", "permute", ["x"], perm=[1, 0]),
        node("joined", "concat", ["flipped", "flipped"], dim=0),
    ]
    outputs = ["probs", "ln", "col_max", "row_mean", "halves", "joined", "x"]
    return {"schema": "yirage.kernel_graph", "version": 1, "nodes": nodes,
            "outputs": [{"tensor": t, "name": f"{t}_out"} for t in outputs]}


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_padded_tiles_and_16_bit_storage(yirage_bin, tmp_path, dtype):
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(mixed_graph(dtype)))
    assert check_graph(yirage_bin, path, tmp_path, seed=3, scale=2.0) >= 9


def test_unsupported_op_is_a_one_line_error(yirage_bin, tmp_path):
    graph = {"schema": "yirage.kernel_graph", "version": 1,
             "nodes": [{"name": "a", "op": "input", "dtype": "f32", "shape": [4]},
                       {"name": "p", "op": "pow", "inputs": ["a", "a"]}],
             "outputs": [{"tensor": "p", "name": "p"}]}
    path = tmp_path / "pow.json"
    path.write_text(json.dumps(graph))
    result = subprocess.run([yirage_bin, "graph", "source", str(path), "--backend", "triton"],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "pow" in result.stderr and "node 'p'" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
