"""Helpers of the tests under tests/ray (a module of its own: conftest.py is pytest's, and a
second module named conftest would be ambiguous beside tests/conftest.py)."""
import os
import socket

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
