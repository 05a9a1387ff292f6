#include "python/arrays.h"

#include <cstring>
#include <new>
#include <optional>

#include <nanobind/ndarray.h>

#include "support/error.h"

namespace yirage::python {
namespace {

using Array = nb::ndarray<nb::ro>;

constexpr std::align_val_t kAlignment{64};  // a cache line, and any AVX-512 load

// DLPack device types that the host addresses directly: plain CPU and CUDA pinned host memory.
constexpr int kDlpackCpu = 1, kDlpackCudaHost = 3;

std::string describe_dtype(nb::dlpack::dtype dt) {
  using Code = nb::dlpack::dtype_code;
  const char* kind = "";
  switch (Code(dt.code)) {
    case Code::Int: kind = "int"; break;
    case Code::UInt: kind = "uint"; break;
    case Code::Float: kind = "float"; break;
    case Code::Bfloat: kind = "bfloat"; break;
    case Code::Complex: kind = "complex"; break;
    case Code::Bool: return "bool";
    default: return fmt::format("DLPack dtype (code {}, {} bits)", dt.code, dt.bits);
  }
  return fmt::format("{}{}", kind, dt.bits);
}

std::optional<ir::DType> dtype_of(nb::dlpack::dtype dt, bool bf16_bits) {
  using Code = nb::dlpack::dtype_code;
  if (dt.lanes != 1) return std::nullopt;
  switch (Code(dt.code)) {
    case Code::Float:
      if (dt.bits == 32) return ir::DType::f32;
      if (dt.bits == 16) return ir::DType::f16;
      break;
    case Code::Bfloat:
      if (dt.bits == 16) return ir::DType::bf16;
      break;
    case Code::Int:
      if (dt.bits == 32) return ir::DType::i32;
      if (dt.bits == 8) return ir::DType::i8;
      break;
    case Code::UInt:
      if (dt.bits == 16 && bf16_bits) return ir::DType::bf16;
      if (dt.bits == 8) return ir::DType::u8;
      break;
    default: break;
  }
  return std::nullopt;
}

// NumPy's spelling of each dtype, for messages a NumPy user can act on.
std::string_view numpy_name(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::f32: return "float32";
    case ir::DType::f16: return "float16";
    case ir::DType::bf16: return "bfloat16 (ml_dtypes.bfloat16)";
    case ir::DType::i32: return "int32";
    case ir::DType::i8: return "int8";
    case ir::DType::u8: return "uint8";
  }
  return "?";
}

ir::Dims shape_of(const Array& array) {
  ir::Dims dims;
  for (size_t i = 0; i < array.ndim(); ++i) dims.push_back(int64_t(array.shape(i)));
  return dims;
}

// Row-major with no gaps. Dims of extent 1 may carry any stride (DLPack producers disagree).
bool is_row_major(const Array& array) {
  if (array.stride_ptr() == nullptr) return true;  // DLPack: null strides mean row-major
  int64_t expected = 1;
  for (size_t i = array.ndim(); i-- > 0;) {
    if (array.shape(i) != 1 && array.stride(i) != expected) return false;
    expected *= int64_t(array.shape(i));
  }
  return true;
}

// Copies a strided host array into row-major order, element by element.
void gather(const Array& array, std::byte* out) {
  size_t itemsize = array.itemsize();
  size_t ndim = array.ndim();
  auto* base = static_cast<const std::byte*>(array.data());
  std::vector<size_t> index(ndim, 0);
  size_t count = array.size();
  for (size_t n = 0; n < count; ++n) {
    int64_t offset = 0;
    for (size_t d = 0; d < ndim; ++d) offset += int64_t(index[d]) * array.stride(d);
    std::memcpy(out + n * itemsize, base + offset * int64_t(itemsize), itemsize);
    for (size_t d = ndim; d-- > 0;) {
      if (++index[d] < array.shape(d)) break;
      index[d] = 0;
    }
  }
}

// ml_dtypes.bfloat16 arrays export neither DLPack nor a buffer format nanobind reads; their
// uint16 view is the same memory, so it is taken instead and read as bfloat16 bits.
bool is_numpy_bfloat16(nb::handle object) {
  nb::handle ndarray_type = nb::module_::import_("numpy").attr("ndarray");
  if (!nb::isinstance(object, ndarray_type)) return false;
  return nb::cast<std::string>(object.attr("dtype").attr("name")) == "bfloat16";
}

// A buffer over host memory the module does not own (the caller's array, or a HostBlock: an
// output, or an input's copy), as the backend's buffer_from_host_ptr gives it; only called where
// the backend's buffers are host memory, where it must give one.
std::unique_ptr<backend::Buffer> host_view(backend::Backend& backend, const std::byte* data,
                                           size_t bytes, backend::HostAccess access,
                                           const std::string& what) {
  std::unique_ptr<backend::Buffer> view =
      backend.buffer_from_host_ptr(const_cast<std::byte*>(data), bytes, access, what);
  if (!view) fail("{}: backend '{}' gave no buffer over host memory", what, backend.name());
  return view;
}

}  // namespace

HostBlock::HostBlock(size_t bytes)
    : data(static_cast<std::byte*>(::operator new(bytes == 0 ? 1 : bytes, kAlignment))),
      size(bytes) {}

HostBlock::~HostBlock() {
  free(data);
}

std::byte* HostBlock::release() {
  return std::exchange(data, nullptr);
}

void HostBlock::free(void* data) noexcept {
  if (data) ::operator delete(data, kAlignment);
}

bool backend_uses_host_memory(const backend::Backend& backend) {
  return backend.buffer_type().host_visible;
}

BoundInput bind_input(nb::handle object, const ir::TensorType& type, const std::string& name,
                      backend::Backend& backend, bool host_memory) {
  BoundInput bound;
  bound.keep_alive = nb::borrow(object);
  // The bfloat16 check costs attribute lookups, so only arrays nanobind cannot read take it.
  Array array;
  bool bf16_bits = false;
  if (!nb::try_cast(bound.keep_alive, array, /*convert=*/false)) {
    bf16_bits = is_numpy_bfloat16(object);
    if (bf16_bits)
      bound.keep_alive = object.attr("view")(nb::module_::import_("numpy").attr("uint16"));
    if (!bf16_bits || !nb::try_cast(bound.keep_alive, array, /*convert=*/false))
      fail("input '{}': expected a NumPy array or a DLPack tensor of {}, got {}", name,
           ir::format_type(type), nb::cast<std::string>(nb::inst_name(object)));
  }

  std::optional<ir::DType> dtype = dtype_of(array.dtype(), bf16_bits);
  if (dtype != type.dtype)
    fail("input '{}': expected dtype {} ({}), got {}", name, ir::dtype_name(type.dtype),
         numpy_name(type.dtype), describe_dtype(array.dtype()));
  if (ir::Dims dims = shape_of(array); dims != type.dims)
    fail("input '{}': expected shape {}, got {}", name, ir::format_dims(type.dims),
         ir::format_dims(dims));
  bool on_host = array.device_type() == kDlpackCpu || array.device_type() == kDlpackCudaHost;
  if (!on_host)
    fail(
        "input '{}': the array is in device memory (DLPack device type {}, id {}); "
        "backend '{}' takes host arrays: move it to the CPU first",
        name, array.device_type(), array.device_id(), backend.name());

  size_t bytes = array.nbytes();
  auto* data = static_cast<const std::byte*>(array.data());
  bool aligned = reinterpret_cast<uintptr_t>(data) % ir::dtype_size(type.dtype) == 0;
  std::string what = fmt::format("input '{}'", name);
  if (host_memory && aligned && is_row_major(array)) {
    bound.buffer = host_view(backend, data, bytes, backend::HostAccess::read_only, what);
    return bound;
  }

  bound.copy = std::make_unique<HostBlock>(bytes);
  if (is_row_major(array)) {
    std::memcpy(bound.copy->data, data, bytes);
  } else {
    gather(array, bound.copy->data);
  }
  if (host_memory) {
    bound.buffer =
        host_view(backend, bound.copy->data, bytes, backend::HostAccess::read_only, what);
  } else {
    bound.buffer = backend.allocate(bytes);
    bound.buffer->write({bound.copy->data, bytes});
  }
  return bound;
}

BoundOutput bind_output(const ir::TensorType& type, const std::string& name,
                        backend::Backend& backend, bool host_memory) {
  BoundOutput bound;
  bound.type = type;
  size_t bytes = size_t(ir::num_elements(type.dims)) * ir::dtype_size(type.dtype);
  bound.block = std::make_unique<HostBlock>(bytes);
  // Poisoned (NaN for every float dtype) so that elements the module never writes show.
  std::memset(bound.block->data, 0xFF, bytes);
  if (host_memory) {
    bound.buffer = host_view(backend, bound.block->data, bytes, backend::HostAccess::read_write,
                             fmt::format("output '{}'", name));
  } else {
    bound.buffer = backend.allocate(bytes);
    bound.buffer->write({bound.block->data, bytes});
    bound.device_buffer = true;
  }
  return bound;
}

void finish_output(BoundOutput& output) {
  if (output.device_buffer) output.buffer->read({output.block->data, output.block->size});
}

nb::object to_numpy(BoundOutput& output) {
  std::vector<size_t> shape;
  for (int64_t d : output.type.dims) shape.push_back(size_t(d));
  nb::dlpack::dtype dt;
  switch (output.type.dtype) {
    case ir::DType::f32: dt = nb::dtype<float>(); break;
    case ir::DType::f16: dt = {uint8_t(nb::dlpack::dtype_code::Float), 16, 1}; break;
    case ir::DType::bf16: dt = nb::dtype<uint16_t>(); break;  // viewed as bfloat16 below
    case ir::DType::i32: dt = nb::dtype<int32_t>(); break;
    case ir::DType::i8: dt = nb::dtype<int8_t>(); break;
    case ir::DType::u8: dt = nb::dtype<uint8_t>(); break;
  }
  nb::object bfloat16;
  if (output.type.dtype == ir::DType::bf16) {
    try {
      bfloat16 = nb::module_::import_("ml_dtypes").attr("bfloat16");
    } catch (nb::python_error&) {
      fail("a bfloat16 output needs the ml_dtypes package (pip install ml-dtypes)");
    }
  }
  // The capsule owns the block from here: NumPy frees it with the last array that uses it.
  std::byte* data = output.block->data;
  nb::capsule owner(data, HostBlock::free);
  output.block->release();
  nb::ndarray<nb::numpy> array(data, shape.size(), shape.data(), owner, nullptr, dt);
  nb::object result = array.cast();
  if (bfloat16.is_valid()) result = result.attr("view")(bfloat16);
  return result;
}

}  // namespace yirage::python
