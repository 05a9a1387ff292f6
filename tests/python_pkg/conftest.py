"""The `yirage` package's own suite. It imports the package as installed (pip install .) or from
a development build (PYTHONPATH=build/<dir>/python after a CMake build with -DYIRAGE_PYTHON=ON).
"""
import os
import pathlib
import tempfile

import numpy as np
import pytest

# superoptimize stores its winners in the tuning cache; this suite gets a cache of its own, so
# that it neither reads the user's entries nor leaves its own behind.
_cache_dir = tempfile.TemporaryDirectory(prefix="yirage-pytest-cache-")
os.environ["YIRAGE_CACHE_DIR"] = _cache_dir.name


@pytest.fixture(scope="session")
def source_dir() -> pathlib.Path:
    return pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
