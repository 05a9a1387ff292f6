// The isolation tests' main: registers the faulty backend, then either serves as a tuning worker
// (when optimize() started this binary as one) or runs the tests.
#include <cstdlib>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "faulty_backend.h"
#include "tune/tune.h"

int main(int argc, char** argv) {
  yirage::backend::register_backend("faulty", yirage::isolation_test::make_faulty_backend);
  if (std::optional<int> code = yirage::tune::serve_as_worker_if_asked(argc, argv)) return *code;
  // Under AddressSanitizer the workers must die of the planted signal, as in a release build,
  // rather than have the sanitizer turn it into a report and exit status 1; the test process
  // itself keeps its options (they are read at start-up).
  const char* asan = std::getenv("ASAN_OPTIONS");
  const std::string options = std::string(asan ? asan : "") + (asan && *asan ? ":" : "") +
                              "handle_segv=0:handle_sigill=0:handle_sigbus=0:handle_abort=0";
  setenv("ASAN_OPTIONS", options.c_str(), 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
