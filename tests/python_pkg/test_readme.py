"""The README's Python examples run as written and check their own results (each block asserts
that the optimized program matches NumPy)."""
import re


def python_blocks(source_dir):
    readme = (source_dir / "README.md").read_text()
    # The Ray section's blocks need a Ray cluster; tests/ray/test_readme_ray.py runs them.
    before, ray_and_after = readme.split("## Scale out with Ray\n", 1)
    after = ray_and_after.split("\n## ", 1)[1]
    return re.findall(r"```python\n(.*?)```", before + after, flags=re.S)


def test_readme_has_a_python_quick_start(source_dir):
    blocks = python_blocks(source_dir)
    assert blocks, "README lost its Python example"
    assert any("superoptimize" in block for block in blocks)


def test_readme_python_blocks_run(source_dir, capsys):
    for i, block in enumerate(python_blocks(source_dir)):
        exec(compile(block, f"README.md python block {i}", "exec"), {"__name__": "__readme__"})
