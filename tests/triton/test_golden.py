"""The generated Triton source of a few suite graphs, diffed against the files in golden/: a change
to the generator shows up as a reviewed diff of these files. After an intended change, rewrite
them with YIRAGE_UPDATE_GOLDEN=1 and review `git diff tests/triton/golden`.

gqa_mugraph.json and lora_mugraph.json are µGraphs the search returned for those workloads, kept
as they were so that the search's own changes do not move these files; ntrans is the unfused
graph, its plain ops as one-node block graphs.
"""
import difflib
import json
import os
import subprocess

import pytest

GRAPHS = {
    "gqa_mugraph": "tests/triton/golden/gqa_mugraph.json",
    "lora_mugraph": "tests/triton/golden/lora_mugraph.json",
    "ntrans": "examples/ntrans.json",
}


def listing(program):
    """The program as one text: per kernel, a comment line with its launch, then its module."""
    parts = [f"# slots: {json.dumps(program['slots'])}\n"]
    for kernel in program["kernels"]:
        parts.append(f"# kernel {kernel['name']}: {kernel['what']}, grid {kernel['grid']}, "
                     f"{kernel['num_warps']} warps, slots {kernel['args']}\n{kernel['source']}")
    return "\n".join(parts)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_generated_source_matches_golden(yirage_bin, source_dir, name):
    result = subprocess.run([yirage_bin, "graph", "source", str(source_dir / GRAPHS[name]),
                             "--backend", "triton"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    text = listing(json.loads(result.stdout))
    golden = source_dir / "tests" / "triton" / "golden" / f"{name}.py.golden"
    if os.environ.get("YIRAGE_UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert golden.exists(), f"{golden} is missing; YIRAGE_UPDATE_GOLDEN=1 writes it"
    expected = golden.read_text()
    diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                        str(golden), "generated"))
    assert text == expected, f"the generated source changed:\n{diff}"
