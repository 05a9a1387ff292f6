"""yirage.ray on a local Ray cluster started by the tests. Needs the `yirage` package (installed,
or PYTHONPATH=<build>/python) and `ray[serve]` (pip install "yirage[ray]"); without ray the tests
skip, unless YIRAGE_REQUIRE_RAY=1 (scripts/test.sh sets it)."""
import os
import pathlib
import tempfile

import pytest

from ray_support import require

# The replicas and the tuning tasks inherit this cache through the environment Ray starts them in,
# so the suite neither reads the user's tuning entries nor leaves its own behind.
_cache_dir = tempfile.TemporaryDirectory(prefix="yirage-ray-cache-")
os.environ["YIRAGE_CACHE_DIR"] = _cache_dir.name


@pytest.fixture(scope="session")
def ray_module():
    try:
        import ray
        from ray import serve  # noqa: F401
    except ImportError:
        require(False, 'ray[serve] is not installed (pip install "yirage[ray]")',
                "YIRAGE_REQUIRE_RAY")
    return ray


@pytest.fixture(scope="session")
def local_ray(ray_module):
    """A Ray of this process on loopback with 4 logical CPUs: two replicas or tuning tasks of one
    CPU each, with room for Serve's controller and proxy, on however many cores there are."""
    ray_module.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
                    _node_ip_address="127.0.0.1")
    yield ray_module
    ray_module.shutdown()


@pytest.fixture(scope="session")
def model_path():
    path = os.environ.get("YIRAGE_MODEL_PATH") or str(
        pathlib.Path.home() / ".cache/yirage/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    require(os.path.exists(path), f"the test model is missing at {path} (scripts/fetch-model.sh)",
            "YIRAGE_REQUIRE_MODEL")
    return path


