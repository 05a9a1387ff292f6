"""A DLPack producer that is neither NumPy nor torch: host memory from ctypes, exported the way a
framework exports it (an unversioned "dltensor" capsule around a DLManagedTensor)."""
import ctypes
import math


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))),
]

_CAPSULE_NAME = b"dltensor"
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

KDL_CPU = 1
KDL_FLOAT = 2


class Float32Buffer:
    """Row-major float32 host memory owned by this object; exports DLPack, nothing else (no
    buffer protocol, no __array__), so a consumer can only read it through DLPack."""

    def __init__(self, shape, values):
        count = math.prod(shape)
        values = list(values)
        assert len(values) == count
        self._memory = (ctypes.c_float * count)(*values)
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._ndim = len(shape)
        self._exported = []  # the capsules point into these, so they live as long as self
        self.address = ctypes.addressof(self._memory)
        self.exports = 0

    def values(self):
        return list(self._memory)

    def __dlpack_device__(self):
        return (KDL_CPU, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("Float32Buffer never copies")
        managed = DLManagedTensor()
        managed.dl_tensor.data = self.address
        managed.dl_tensor.device = DLDevice(KDL_CPU, 0)
        managed.dl_tensor.ndim = self._ndim
        managed.dl_tensor.dtype = DLDataType(KDL_FLOAT, 32, 1)
        managed.dl_tensor.shape = self._shape
        managed.dl_tensor.strides = None  # row-major
        managed.dl_tensor.byte_offset = 0
        self._exported.append(managed)
        self.exports += 1
        return _capsule_new(ctypes.addressof(managed), _CAPSULE_NAME, None)
