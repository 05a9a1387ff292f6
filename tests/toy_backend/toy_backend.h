// A toy backend for tests: host memory, graphs run op by op by the reference executor, timed by
// the default host clock, with kToyDevices devices of one kind. It lives in this folder only;
// tests add it to the registry with backend::register_backend("toy", make_toy_backend).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace yirage::toy {

inline constexpr int kToyDevices = 2;

std::unique_ptr<backend::Backend> make_toy_backend(const backend::BackendOptions& options);

}  // namespace yirage::toy
