// A test backend with planted faults: graphs run op by op by the reference executor, as the toy
// backend's do, but a module whose graph has a node named after a fault commits it at launch, as
// a code-generation bug would. Buffers end at an inaccessible page, as a device's memory checker
// would have them, so that a write one element past the end faults instead of going unnoticed.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace yirage::isolation_test {

// Node names that plant a fault in the module compiled from their graph.
inline constexpr const char* kCrash = "plant_trap";             // an illegal instruction: SIGILL
inline constexpr const char* kAbort = "plant_abort";            // std::abort: SIGABRT
inline constexpr const char* kHang = "plant_infinite_loop";     // never returns
inline constexpr const char* kOutOfBounds = "plant_oob_write";  // one element past the output

// The next `count` compiles in this process fail as a kernel binary that no longer loads would.
void fail_next_compiles(int count);

std::unique_ptr<backend::Backend> make_faulty_backend(const backend::BackendOptions& options);

}  // namespace yirage::isolation_test
