"""What `yr.superoptimize(..., cluster=ADDRESS)` and `yirage optimize --ray ADDRESS` say when Ray
cannot be used: one line naming what is missing or unreachable, within seconds. Each case runs in
a process of its own, so that nothing here connects or shadows the test process's Ray."""
import os
import subprocess
import sys

import pytest

from ray_support import require, yirage_command

# Nothing listens on port 1: a refused connection, at once.
NOWHERE = "127.0.0.1:1"


def python(code, env=None):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.fixture
def no_ray(tmp_path):
    """PYTHONPATH with a `ray` that fails to import first, as where Ray is not installed."""
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'ray\'", name="ray")\n')
    path = os.pathsep.join(p for p in [str(tmp_path), os.environ.get("PYTHONPATH")] if p)
    return dict(os.environ, PYTHONPATH=path)


@pytest.fixture
def command(source_dir):
    path = yirage_command()
    require(path is not None, "no yirage command (YIRAGE_BIN, pip's or the build's)",
            "YIRAGE_REQUIRE_RAY")
    return path


GRAPH = "examples/lora.json"


def superoptimize_error(source_dir, env=None):
    done = python(
        "import yirage as yr\n"
        f"g = yr.load({str(source_dir / GRAPH)!r})\n"
        "try:\n"
        f"    g.superoptimize(backend='cpu', budget=1, cluster={NOWHERE!r})\n"
        "except yr.Error as e:\n"
        "    print(e)\n", env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_superoptimize_cluster_without_ray_names_the_extra(source_dir, no_ray):
    assert superoptimize_error(source_dir, no_ray) == (
        'superoptimize(cluster=...): ray is not installed (pip install "yirage[ray]")')


def test_superoptimize_cluster_that_nothing_answers(ray_module, source_dir):
    assert superoptimize_error(source_dir) == (
        f"superoptimize(cluster=...): cannot reach the Ray cluster at {NOWHERE} "
        "(Connection refused)")


def optimize_error(command, source_dir, *extra, env=None):
    done = subprocess.run(
        [command, "optimize", str(source_dir / GRAPH), "--backend", "cpu", "--budget", "1",
         "--ray", NOWHERE, *extra], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 1 and done.stdout == "", (done.stdout, done.stderr)
    return done.stderr.strip().splitlines()[-1]


def test_optimize_ray_without_ray_names_the_extra(command, source_dir, no_ray):
    assert optimize_error(command, source_dir, env=no_ray) == (
        'yirage: error: optimize --ray: ray is not installed (pip install "yirage[ray]")')


def test_optimize_ray_that_nothing_answers(ray_module, command, source_dir):
    assert optimize_error(command, source_dir) == (
        f"yirage: error: optimize --ray: cannot reach the Ray cluster at {NOWHERE} "
        "(Connection refused)")


def test_optimize_ray_without_python_or_the_package(command, source_dir, tmp_path):
    missing = dict(os.environ, YIRAGE_RAY_PYTHON=str(tmp_path / "no-python3"))
    assert optimize_error(command, source_dir, env=missing) == (
        f"yirage: error: optimize --ray: cannot run {tmp_path / 'no-python3'} (Python 3 with the "
        'yirage package and Ray: pip install "yirage[ray]", or set YIRAGE_RAY_PYTHON)')
    # An interpreter without the package: python3 -m says so and exits 1.
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho \"$0: Error while finding module specification for "
                    "'yirage.ray_cli' (ModuleNotFoundError: No module named 'yirage')\" >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    assert optimize_error(command, source_dir, env=dict(os.environ, YIRAGE_RAY_PYTHON=str(fake))) \
        == (f"yirage: error: optimize --ray: `{fake} -m yirage.ray_cli` failed (exit 1); it needs "
            'the yirage Python package with Ray: pip install "yirage[ray]"')


def test_optimize_ray_refuses_what_it_cannot_ship(command, source_dir, tmp_path):
    assert optimize_error(command, source_dir, "--no-tune") == (
        "yirage: error: optimize --ray: --no-tune searches here only; --ray tunes on the cluster")
    assert optimize_error(command, source_dir, "--checkpoint", str(tmp_path / "c")) == (
        "yirage: error: optimize --ray: --checkpoint is a file on this machine; not with --ray")
