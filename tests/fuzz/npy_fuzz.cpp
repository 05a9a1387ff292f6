// libFuzzer target: arbitrary bytes as an .npy file, converted for every graph-input dtype.
// Parsing and conversion must either succeed or throw yirage::Error.
#include <cstddef>
#include <cstdint>
#include <span>

#include "support/error.h"
#include "tools/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace yirage;
  tools::NpyArray array;
  try {
    array = tools::parse_npy(std::as_bytes(std::span(data, size)), "<fuzz>");
  } catch (const Error&) {
    return 0;
  }
  for (ir::DType dtype : ir::kAllDTypes) {
    try {
      (void)tools::tensor_from_npy(array, ir::TensorType{dtype, array.shape}, "x", "<fuzz>");
    } catch (const Error&) {
    }
  }
  return 0;
}
