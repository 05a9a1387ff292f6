// A graph whose tensors cannot fit the machine's memory is refused when it is compiled, with the
// numbers, before anything is allocated.
#include <gtest/gtest.h>

#include "cpu_test_util.h"
#include "support/error.h"

namespace yirage::cpu_test {
namespace {

TEST(MemoryLimit, TheCpuDeviceStatesItsMemory) {
  const backend::DeviceDescription device = cpu_backend().device();
  const nlohmann::json& memory = device.capabilities["memory_bytes"];
  ASSERT_TRUE(memory.is_number_unsigned()) << memory.dump();
  EXPECT_GT(memory.get<uint64_t>(), uint64_t(1) << 26);
}

TEST(MemoryLimit, AGraphLargerThanMemoryIsRefusedAtCompileTime) {
  ir::KernelGraph g;  // 2^20 × 2^19 f32: 2 TiB per tensor
  auto x = g.input("x", {int64_t(1) << 20, int64_t(1) << 19}, ir::DType::f32);
  g.mark_output(g.relu(x), "y");
  try {
    cpu_backend().compile(g);
    ADD_FAILURE() << "a 4 TiB graph compiled";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("backend 'cpu': the graph's tensors need 4096 GiB, more than the"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("GiB of memory of device"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(MemoryLimit, AGraphThatFitsStillCompiles) {
  ir::KernelGraph g;
  auto x = g.input("x", {64, 64}, ir::DType::f32);
  g.mark_output(g.relu(x), "y");
  EXPECT_NO_THROW(cpu_backend().compile(g));
}

}  // namespace
}  // namespace yirage::cpu_test
