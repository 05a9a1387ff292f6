"""Fixtures shared by the pytest suites under tests/: the `yirage` binary under test and the source
tree."""
import os
import pathlib

import pytest


@pytest.fixture(scope="session")
def yirage_bin() -> str:
    path = os.environ.get("YIRAGE_BIN")
    if not path or not os.path.exists(path):
        pytest.fail("YIRAGE_BIN must name the built yirage binary (ctest sets it)")
    return path


@pytest.fixture(scope="session")
def source_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("YIRAGE_SOURCE_DIR", pathlib.Path(__file__).parents[1]))
