"""Helpers of the tests under tests/ray (a module of its own: conftest.py is pytest's, and a
second module named conftest would be ambiguous beside tests/conftest.py)."""
import os
import shutil
import socket
import sysconfig

import pytest


def require(condition, reason, variable):
    if condition:
        return
    if os.environ.get(variable) == "1":
        pytest.fail(f"{variable}=1 but {reason}")
    pytest.skip(reason)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def yirage_command():
    """The `yirage` command of this package: $YIRAGE_BIN (ctest's), the build folder's beside the
    package (PYTHONPATH=<build>/python), or pip's script beside this interpreter."""
    import yirage as yr

    here = os.path.dirname(os.path.abspath(yr.__file__))
    for path in (os.environ.get("YIRAGE_BIN"),
                 os.path.join(here, "..", "..", "yirage"),
                 os.path.join(sysconfig.get_path("scripts"), "yirage")):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.realpath(path)
    return shutil.which("yirage")
