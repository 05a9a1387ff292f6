// The tuning cache's key on the cuda backend: each YIRAGE_CUDA_* switch that turns off a feature
// this device's code generator uses changes the key, so that a winner tuned with the feature is
// never reused without it, nor the other way round. GPU only: without a device, or on one too old
// for the feature, it is off already and the switch changes nothing.
#include <cstdlib>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "cuda_test_support.h"
#include "suite/suite.h"
#include "tune/tune.h"

namespace yirage::backend {
namespace {

// Sets an environment variable for one scope, restoring what was there.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedVariable() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(CudaGpu, EachFeatureSwitchChangesTheCacheKey) {
  CUDA_OR_SKIP(cuda);
  const ir::KernelGraph g = suite::build_workload("rmsnorm_linear", 1, ir::DType::f16);
  const std::string settings = cuda->codegen_settings();
  const std::string key = tune::cache_key(g, *cuda).id();
  int features_on = 0;
  for (const char* variable : {"YIRAGE_CUDA_FOLD_ADDS", "YIRAGE_CUDA_GROUP_PRODUCTS",
                               "YIRAGE_CUDA_TMA", "YIRAGE_CUDA_STREAM", "YIRAGE_CUDA_CLUSTER",
                               "YIRAGE_CUDA_ROWS", "YIRAGE_CUDA_WGMMA", "YIRAGE_CUDA_PDL"}) {
    const ScopedVariable off(variable, "0");
    if (cuda->codegen_settings() == settings) continue;  // the feature is off on this device
    ++features_on;
    EXPECT_NE(tune::cache_key(g, *cuda).id(), key) << variable << "=0 kept the key of " << settings;
  }
  EXPECT_GT(features_on, 0) << "no switchable feature is on: " << settings;
  EXPECT_EQ(tune::cache_key(g, *cuda).id(), key) << "the switches were not restored";
}

}  // namespace
}  // namespace yirage::backend
