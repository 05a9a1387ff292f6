// Tensors crossing the Python boundary: NumPy arrays and DLPack producers in, NumPy arrays out.
//
// Where the backend's memory is host memory and the caller's array is a host array of the right
// dtype in row-major layout, the backend reads the caller's memory in place; outputs are written
// into blocks this module allocates and then handed to NumPy as the arrays' own memory, so
// neither direction copies. Anything else (strided views, device memory for a host backend, a
// backend with device memory) is copied once, and the call records which inputs were copied.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "python/bindings.h"

namespace yirage::python {

// Memory this module owns, aligned for any SIMD load, later owned by a NumPy array.
struct HostBlock {
  std::byte* data = nullptr;
  size_t size = 0;

  explicit HostBlock(size_t bytes);
  ~HostBlock();
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;
  // Gives up ownership; the caller frees with HostBlock::free.
  std::byte* release();
  static void free(void* data) noexcept;
};

// One input made ready for a launch: the buffer the module reads, and what keeps its memory
// alive (the caller's array or a copy).
struct BoundInput {
  std::unique_ptr<backend::Buffer> buffer;
  nb::object keep_alive;            // the caller's array or the view taken of it
  std::unique_ptr<HostBlock> copy;  // set when the input had to be copied
  bool copied() const { return copy != nullptr; }
};

// Checks `object` against the graph input `type` named `name` and binds it for `backend`.
// Throws yirage::Error naming the input on a wrong dtype, shape or device. Needs the GIL.
// `host_memory`: the backend's buffers are host memory, so it can read the caller's directly.
BoundInput bind_input(nb::handle object, const ir::TensorType& type, const std::string& name,
                      backend::Backend& backend, bool host_memory);

// An output about to be written: a block of host memory, and the buffer the module writes (the
// block itself for a host-memory backend, else a device buffer read back after the launch).
struct BoundOutput {
  ir::TensorType type;
  std::unique_ptr<HostBlock> block;
  std::unique_ptr<backend::Buffer> buffer;
  bool device_buffer = false;
};

BoundOutput bind_output(const ir::TensorType& type, const std::string& name,
                        backend::Backend& backend, bool host_memory);

// After the launch: reads device buffers back into the host block (no GIL needed).
void finish_output(BoundOutput& output);

// Hands the block to a new NumPy array without copying (bfloat16 as an ml_dtypes view).
nb::object to_numpy(BoundOutput& output);

// Whether `backend` keeps its buffers in host memory, as its buffer type says.
bool backend_uses_host_memory(const backend::Backend& backend);

}  // namespace yirage::python
