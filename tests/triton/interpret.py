"""Runs the Triton kernels YiRage generates (`yirage graph source FILE --backend triton`) under
Triton's interpreter, on NumPy arrays: no GPU, and no torch.

The interpreter takes anything that looks like a torch tensor (a data_ptr(), a dtype, a storage it
copies to and from the host); HostArray is the least of that over a NumPy array, whose memory is
already the host's, so the copies are the array itself. bf16 lives in uint16 arrays.
"""
import importlib.util
import os
import pathlib

import numpy as np

os.environ["TRITON_INTERPRET"] = "1"  # read when triton.jit wraps a function
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

NUMPY_DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "i32": np.int32,
                "i8": np.int8, "u8": np.uint8}
TRITON_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "i32": "int32",
                 "i8": "int8", "u8": "uint8"}


class _Storage:
    def __init__(self, array):
        self.array = array

    def data_ptr(self):
        return self.array.ctypes.data

    def cpu(self):
        return self

    def copy_(self, other):
        pass  # host memory already: nothing to copy back


class HostArray:
    """A NumPy array as the interpreter's launcher wants a tensor."""

    def __init__(self, array, dtype):
        assert array.flags.c_contiguous
        self.array = array
        self.dtype = TRITON_DTYPES[dtype]

    def data_ptr(self):
        return self.array.ctypes.data

    def untyped_storage(self):
        return _Storage(self.array)

    def new_empty(self, *args, **kwargs):
        return self

    def set_(self, *args):
        return self

    def storage_offset(self):
        return 0

    def size(self):
        return self.array.shape

    def stride(self):
        return tuple(s // self.array.itemsize for s in self.array.strides)


def _poisoned(slot):
    dtype = NUMPY_DTYPES[slot["dtype"]]
    shape = tuple(slot["shape"])
    if slot["dtype"] == "bf16":
        return np.full(shape, 0x7FC0, dtype)  # a quiet NaN's bits
    if np.issubdtype(dtype, np.floating):
        return np.full(shape, np.nan, dtype)
    return np.full(shape, np.iinfo(dtype).min, dtype)


def _load_kernel(kernel, folder):
    path = pathlib.Path(folder) / f"{kernel['name']}.py"
    path.write_text(kernel["source"])
    spec = importlib.util.spec_from_file_location(kernel["name"], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, kernel["name"])


def run_program(program, inputs, folder):
    """Runs every kernel of `program` (the JSON) in order on `inputs` (one array per graph input,
    of its slot's dtype) and returns the outputs. Outputs and intermediates start poisoned (NaN,
    or the most negative integer), so an element no kernel writes shows up. `folder` holds the
    kernels' module files, which Triton reads the source from."""
    slots = program["slots"]
    arrays = []
    for slot in slots:
        if slot["kind"] == "input":
            given = inputs[slot["index"]]
            expected = (NUMPY_DTYPES[slot["dtype"]], tuple(slot["shape"]))
            assert (given.dtype, given.shape) == expected, (slot, given.dtype, given.shape)
            arrays.append(np.ascontiguousarray(given))
        else:
            arrays.append(_poisoned(slot))
    views = [HostArray(a, s["dtype"]) for a, s in zip(arrays, slots)]
    for kernel in program["kernels"]:
        function = _load_kernel(kernel, folder)
        grid = tuple(kernel["grid"])
        # The padding of a tile computes on zeros (0/0, exp of garbage) and is never stored.
        with np.errstate(all="ignore"):
            function[grid](*[views[i] for i in kernel["args"]])
    outputs = sorted((s["index"], a) for s, a in zip(slots, arrays) if s["kind"] == "output")
    return [a for _, a in outputs]
