"""`pip install .` installs the `yirage` command next to the interpreter's scripts."""
import os
import pathlib
import subprocess
import sysconfig

import pytest

import yirage as yr


def installed_package() -> bool:
    """Whether yirage was imported from this interpreter's site-packages (not a build tree)."""
    package = pathlib.Path(yr.__file__).resolve().parent
    roots = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    return any(package.is_relative_to(pathlib.Path(root).resolve()) for root in roots)


def test_yirage_command_is_installed_with_the_package():
    if not installed_package():
        pytest.skip("yirage is imported from a build tree, not installed with pip")
    command = pathlib.Path(sysconfig.get_paths()["scripts"]) / "yirage"
    assert command.exists(), f"{command} is missing"
    result = subprocess.run([str(command), "--version"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"yirage {yr.__version__}"
    backends = subprocess.run([str(command), "backends"], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "PATH": os.defpath})
    assert backends.returncode == 0, backends.stderr
    for name in yr.get_available_backends():
        assert name in backends.stdout
