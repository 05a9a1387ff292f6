// NumPy .npy files: the way `yirage run` takes inputs from and hands outputs to NumPy users.
//
// Hand-written because no Debian package provides a C++ .npy reader; the format is small
// (numpy.lib.format documents it): a magic string, a version, a Python-literal header dict with
// the dtype, the order and the shape, then the raw elements.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace yirage::tools {

// An array as a C-order .npy file holds it: little-endian elements.
struct NpyArray {
  std::string descr;  // NumPy's dtype string: "<f4", "<f2", "<i4", "<i8", "|i1", "|u1"
  ir::Dims shape;
  std::vector<std::byte> data;
};

// Reads and validates a v1.0 or v2.0 file; errors name the file and the byte offset.
NpyArray read_npy(const std::string& path);
// The same checks on bytes already in memory; `path` only names them in errors.
NpyArray parse_npy(std::span<const std::byte> bytes, const std::string& path);
void write_npy(const std::string& path, const NpyArray& array);

// Converts an array for a graph input of type `expected`, named `input`. Shapes must match
// exactly. f32 takes '<f4'; f16 takes '<f2', or '<f4' when every value is exactly an f16; bf16
// (which NumPy lacks) takes '<f4' when every value is exactly a bf16; i32 takes '<i4', or '<i8'
// when every value fits. Nothing is rounded silently: an inexact value is an error naming its
// element index.
ir::HostTensor tensor_from_npy(const NpyArray& array, const ir::TensorType& expected,
                               const std::string& input, const std::string& path);

// The array NumPy users get for a tensor; bf16 is widened, losslessly, to '<f4'.
NpyArray npy_from_tensor(const ir::HostTensor& tensor);

}  // namespace yirage::tools
