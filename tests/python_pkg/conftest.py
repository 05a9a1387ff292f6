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


def require_torch():
    """torch, or the calling test (or module) skipped where it is not installed; where
    YIRAGE_REQUIRE_TORCH=1 (scripts/test.sh, whose install-deps.sh installs torch) a missing
    torch is an import error instead, so that CI never passes these tests by skipping them."""
    if os.environ.get("YIRAGE_REQUIRE_TORCH") == "1":
        import torch
        return torch
    return pytest.importorskip("torch")


@pytest.fixture(scope="session")
def source_dir() -> pathlib.Path:
    return pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
