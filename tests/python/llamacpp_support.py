"""What the llama.cpp comparisons share: where the model is, and how a missing requirement ends a
test (a skip on a developer's machine, a failure where YIRAGE_REQUIRE_LLAMACPP=1, as in CI)."""
import os
import pathlib

import pytest

MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def requirement_missing(reason):
    if os.environ.get("YIRAGE_REQUIRE_LLAMACPP") == "1":
        pytest.fail(f"YIRAGE_REQUIRE_LLAMACPP=1 but {reason}")
    pytest.skip(reason)


def model_path():
    if os.environ.get("YIRAGE_MODEL_PATH"):
        return pathlib.Path(os.environ["YIRAGE_MODEL_PATH"])
    directory = os.environ.get("YIRAGE_MODEL_DIR")
    if not directory:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        directory = os.path.join(cache, "yirage", "models")
    return pathlib.Path(directory) / MODEL_NAME


def llama_cpp_and_model():
    """The llama_cpp module and the model's path, or the test ends as requirement_missing says."""
    try:
        import llama_cpp
    except ImportError:
        requirement_missing("llama_cpp is not importable (pip install llama-cpp-python)")
    model = model_path()
    if not model.is_file():
        requirement_missing(f"the model is missing at {model} (run scripts/fetch-model.sh)")
    return llama_cpp, model
