// The constructors registry.cpp lists, one per backend folder. Internal to backend/.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace yirage::backend {

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);
std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options);
std::unique_ptr<Backend> make_opencl_backend(const BackendOptions& options);
std::unique_ptr<Backend> make_triton_backend(const BackendOptions& options);
std::unique_ptr<Backend> make_reference_backend(const BackendOptions& options);

}  // namespace yirage::backend
