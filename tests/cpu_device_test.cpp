// Describing the host CPU, with canned /proc/cpuinfo text from machines other than this one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backend/cpu/cpu_device.h"

namespace yirage::backend::cpu {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr std::string_view kX86 =
    "processor\t: 0\n"
    "vendor_id\t: GenuineIntel\n"
    "model name\t: Intel(R) Xeon(R) Platinum 8480+\n"
    "flags\t\t: fpu sse2 sse4_2 avx avx2 fma f16c avx512f avx512bw avx512_fp16 amx_tile "
    "amx_bf16 hypervisor\n"
    "\n"
    "processor\t: 1\n"
    "model name\t: Some Other Name\n"
    "flags\t\t: fpu sse2\n";

constexpr std::string_view kArm =
    "processor\t: 0\n"
    "BogoMIPS\t: 243.75\n"
    "Features\t: fp asimd evtstrm aes pmull asimdhp cpuid asimddp sve i8mm bf16\n"
    "CPU implementer\t: 0x41\n"
    "CPU architecture: 8\n"
    "CPU part\t: 0xd40\n";

CpuFacts facts_from(std::string_view cpuinfo, std::string arch) {
  CpuFacts facts;
  facts.arch = std::move(arch);
  parse_cpuinfo(cpuinfo, facts);
  return facts;
}

TEST(CpuDevice, ParsesX86ModelAndRelevantFlagsOfTheFirstProcessor) {
  CpuFacts facts = facts_from(kX86, "x86_64");
  EXPECT_EQ(facts.model, "Intel(R) Xeon(R) Platinum 8480+");
  EXPECT_THAT(facts.isa, ElementsAre("amx_bf16", "amx_tile", "avx", "avx2", "avx512_fp16",
                                     "avx512bw", "avx512f", "f16c", "fma", "sse4_2"));
  EXPECT_EQ(vector_bits(facts), 512);
}

TEST(CpuDevice, NamesArmCoresByImplementerAndPart) {
  CpuFacts facts = facts_from(kArm, "aarch64");
  EXPECT_EQ(facts.model, "CPU implementer 0x41 part 0xd40");
  EXPECT_THAT(facts.isa, ElementsAre("asimd", "asimddp", "asimdhp", "bf16", "i8mm", "sve"));
  EXPECT_EQ(vector_bits(facts), 128);
}

TEST(CpuDevice, FallsBackToHardwareThenArch) {
  EXPECT_EQ(facts_from("Hardware\t: BCM2835\n", "armv7l").model, "BCM2835");
  CpuFacts bare = facts_from("", "riscv64");
  EXPECT_EQ(bare.model, "riscv64");
  EXPECT_THAT(bare.isa, IsEmpty());
  EXPECT_EQ(vector_bits(bare), std::nullopt);
  EXPECT_EQ(vector_bits(facts_from("", "x86_64")), 128);
  EXPECT_EQ(vector_bits(facts_from("flags : sse4_2 avx avx2\n", "x86_64")), 256);
}

TEST(CpuDevice, ParsesCacheSizes) {
  EXPECT_EQ(parse_cache_size("32K"), 32 * 1024);
  EXPECT_EQ(parse_cache_size("1024K"), 1024 * 1024);
  EXPECT_EQ(parse_cache_size("32M"), 32 * 1024 * 1024);
  EXPECT_EQ(parse_cache_size("65536"), 65536);
  EXPECT_EQ(parse_cache_size(""), std::nullopt);
  EXPECT_EQ(parse_cache_size("K"), std::nullopt);
  EXPECT_EQ(parse_cache_size("12Q"), std::nullopt);
}

TEST(CpuDevice, FingerprintFollowsModelIsaAndCores) {
  CpuFacts base = facts_from(kX86, "x86_64");
  base.cores = 8;
  std::string fingerprint = describe_cpu(base).fingerprint;
  EXPECT_EQ(fingerprint.size(), 16u);
  EXPECT_EQ(describe_cpu(base).fingerprint, fingerprint);

  CpuFacts other_model = base, other_isa = base, other_cores = base, other_cache = base;
  other_model.model += " v2";
  other_isa.isa.pop_back();
  other_cores.cores = 16;
  other_cache.l2_bytes = 1 << 20;
  EXPECT_NE(describe_cpu(other_model).fingerprint, fingerprint);
  EXPECT_NE(describe_cpu(other_isa).fingerprint, fingerprint);
  EXPECT_NE(describe_cpu(other_cores).fingerprint, fingerprint);
  EXPECT_EQ(describe_cpu(other_cache).fingerprint, fingerprint);
}

TEST(CpuDevice, UnknownFactsAreNull) {
  CpuFacts facts = facts_from("", "riscv64");
  nlohmann::json caps = describe_cpu(facts).capabilities;
  EXPECT_EQ(caps["model"], "riscv64");
  EXPECT_EQ(caps["arch"], "riscv64");
  EXPECT_EQ(caps["isa"], nlohmann::json::array());
  for (const char* key : {"cores", "vector_bits", "l1d_bytes", "l2_bytes", "l3_bytes"})
    EXPECT_TRUE(caps[key].is_null()) << key;
}

TEST(CpuDevice, DescribesThisMachine) {
  CpuFacts facts = read_host_cpu();
  EXPECT_FALSE(facts.arch.empty());
  EXPECT_FALSE(facts.model.empty());
  EXPECT_GE(facts.cores, 1);
  DeviceDescription first = describe_cpu(facts);
  EXPECT_EQ(describe_cpu(read_host_cpu()).fingerprint, first.fingerprint);
  for (const char* key :
       {"model", "isa", "cores", "vector_bits", "l1d_bytes", "l2_bytes", "l3_bytes", "arch"})
    EXPECT_TRUE(first.capabilities.contains(key)) << key;
}

}  // namespace
}  // namespace yirage::backend::cpu
