"""Zero copy across the boundary: host arrays in row-major layout are read in place by the backend,
and outputs are NumPy arrays over the memory the backend wrote, which NumPy and torch take through
DLPack without a copy. Every claim is checked by data pointer."""
import gc

import numpy as np
import pytest

import yirage as yr
from conftest import require_torch
from dlpack_producer import Float32Buffer


def host_memory_backend():
    """The default backend, when its buffers are host memory (reference and cpu are); a device
    backend gets a copy by design."""
    name = yr.get_default_backend()
    if name not in ("reference", "cpu"):
        pytest.skip(f"default backend {name} keeps its buffers in device memory")
    return name


def exp_times(shape=(2, 3)):
    g = yr.new_kernel_graph()
    x = g.new_input(dims=shape, dtype=yr.float32, name="x")
    y = g.new_input(dims=shape, dtype=yr.float32, name="y")
    g.mark_output(g.mul(g.exp(x), y))
    return g.superoptimize(backend=host_memory_backend(), budget=20.0)


def test_numpy_inputs_are_read_in_place_and_outputs_are_not_copied():
    opt = exp_times()
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    y = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    (out,) = opt(inputs=[x, y])
    run = opt.last_run()
    assert run["inputs_copied"] == [False, False]
    assert run["input_addresses"] == [x.ctypes.data, y.ctypes.data]
    assert run["output_addresses"] == [out.ctypes.data]
    assert out.flags.c_contiguous and out.flags.writeable
    np.testing.assert_allclose(out, np.exp(x) * y, rtol=1e-6)
    # NumPy takes the output through DLPack as the same memory.
    assert np.from_dlpack(out).ctypes.data == out.ctypes.data


def test_a_dlpack_producer_that_is_not_numpy_goes_in_without_a_copy():
    opt = exp_times()
    x = Float32Buffer((2, 3), [0.5, -1.0, 0.25, 2.0, 0.0, -0.5])
    y = Float32Buffer((2, 3), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert not hasattr(x, "__array__") and not isinstance(x, np.ndarray)
    (out,) = opt(inputs=[x, y])
    run = opt.last_run()
    assert x.exports == 1 and y.exports == 1
    assert run["inputs_copied"] == [False, False]
    assert run["input_addresses"] == [x.address, y.address]
    expected = np.exp(np.array(x.values(), np.float32).reshape(2, 3)) * np.array(
        y.values(), np.float32).reshape(2, 3)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_outputs_outlive_the_optimized_graph():
    opt = exp_times()
    x = np.zeros((2, 3), np.float32)
    (out,) = opt(inputs=[x, np.ones((2, 3), np.float32)])
    address = out.ctypes.data
    view = np.from_dlpack(out)
    del opt, out
    gc.collect()
    assert view.ctypes.data == address
    np.testing.assert_array_equal(view, np.ones((2, 3), np.float32))


def test_strided_inputs_are_copied_and_said_so():
    opt = exp_times()
    base = np.arange(12, dtype=np.float32).reshape(3, 4) / 8
    x = base[:2, :3]  # a view with row stride 4: not row-major
    y = np.ones(12, np.float32)[::2].reshape(2, 3)
    (out,) = opt(inputs=[x, y])
    assert opt.last_run()["inputs_copied"] == [True, True]
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)


def test_device_memory_is_refused_with_a_clear_error():
    class OnGpu(Float32Buffer):
        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

        def __dlpack__(self, **kwargs):
            capsule = super().__dlpack__(**kwargs)
            self._exported[-1].dl_tensor.device.device_type = 2
            return capsule

    opt = exp_times()
    x = OnGpu((2, 3), [0.0] * 6)
    with pytest.raises(yr.Error, match=r"input 'x': the array is in device memory .*move it to the CPU"):
        opt(inputs=[x, np.ones((2, 3), np.float32)])


def test_torch_tensors_in_and_out_without_a_copy():
    torch = require_torch()
    opt = exp_times()
    x = torch.rand(2, 3, dtype=torch.float32)
    y = torch.rand(2, 3, dtype=torch.float32)
    (out,) = opt(inputs=[x, y])
    run = opt.last_run()
    assert run["inputs_copied"] == [False, False]
    assert run["input_addresses"] == [x.data_ptr(), y.data_ptr()]
    taken = torch.from_dlpack(out)
    assert taken.data_ptr() == out.ctypes.data
    torch.testing.assert_close(taken, torch.exp(x) * y)
