"""yirage.verify: a µGraph a user wrote against its kernel graph, as `yirage verify` checks it."""
import pytest

import yirage as yr


def data(source_dir, name):
    return source_dir / "tests" / "data" / name


def test_a_correct_mugraph_is_verified_with_bound_assumptions_and_float_checks(source_dir):
    mugraph = yr.load(str(data(source_dir, "mugraph.json")))  # a graph object or a path
    report = yr.verify(data(source_dir, "graph.json"), mugraph)
    assert report["verified"] is True and report["reason"] is None
    assert report["trials"] >= 2 and report["false_accept_bound"] <= 1e-9
    assert any("multiples of p" in a for a in report["assumptions"])
    checks = report["float_checks"]
    assert [c["distribution"] for c in checks] == ["uniform", "large", "outliers", "near_overflow"]
    assert all(c["passed"] and c["tolerance"] > 0 for c in checks)
    assert all(c["input_graph_error_from_f32"] is None for c in checks)  # an f32 graph


def test_a_wrong_mugraph_gets_a_one_line_reason(source_dir):
    wrong = data(source_dir, "mugraph_wrong.json")  # multiplies by the rms where it should divide
    report = yr.verify(data(source_dir, "graph.json"), wrong, seed=3)
    assert report["verified"] is False
    assert report["reason"].startswith("not equivalent: output 0 ('out') differs at")
    assert "\n" not in report["reason"]
    assert report["mismatch"]["name"] == "out"


def test_mismatched_inputs_raise_naming_the_input(source_dir):
    with pytest.raises(yr.Error, match=r"input 0 is f32\[2, 4096\] \('X'\)"):
        yr.verify(source_dir / "examples" / "rmsnorm_linear.json", data(source_dir, "mugraph.json"))


def test_a_bad_file_raises_naming_it(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": "yirage.kernel_graph", "nodes": [')
    with pytest.raises(yr.Error, match="broken.json"):
        yr.verify(broken, broken)
