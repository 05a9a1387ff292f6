// paged_attention (ir::PagedAttentionOp): the reference executor against a dense computation over
// the gathered keys, the cpu backend against the reference with its pool bound once or twice, the
// errors for bad tables and positions on both, the op's type rules, and its JSON round trip.
#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cpu_test_util.h"
#include "paged_attention_cases.h"
#include "test_util.h"
#include "tune/tune.h"

namespace yirage::cpu_test {
namespace {

using namespace paged_attention_cases;
using test_util::error_of;

bool same_bytes(const ir::HostTensor& a, const ir::HostTensor& b) {
  return a.type == b.type && a.bytes == b.bytes;
}

TEST(PagedAttention, ReferenceIsAttentionOverTheGatheredKeysAfterTheAppends) {
  // Range 40 makes scores of thousands: exp without the max subtracted would overflow.
  for (float range : {1.0f, 40.0f})
    for (const Batch& b : {mixed_batch(), mixed_batch(4, 4, 8), mixed_batch(6, 1, 6)}) {
      const ir::KernelGraph g = graph_of(b);
      const std::vector<ir::HostTensor> in = inputs_of(g, b, 3, range);
      const std::vector<ir::HostTensor> got = verify::run_reference(g, in);
      const std::vector<ir::HostTensor> want = expected_of(b, in);
      EXPECT_LE(max_relative_error(got[0], want[0]), 1e-6) << "range " << range;
      // Nothing but the appended slots changes, and those hold k and v rounded to f16.
      EXPECT_TRUE(same_bytes(got[1], want[1])) << "range " << range;
      for (int64_t e = 0; e < b.heads * b.d; ++e) EXPECT_EQ(got[0].get(4 * b.heads * b.d + e), 0);
    }
}

TEST(PagedAttention, CpuBackendMatchesTheReference) {
  for (float range : {1.0f, 40.0f})
    for (const Batch& b : {mixed_batch(), mixed_batch(8, 2, 16), mixed_batch(6, 1, 6)}) {
      const ir::KernelGraph g = graph_of(b);
      const std::vector<ir::HostTensor> in = inputs_of(g, b, 11, range);
      const std::vector<ir::HostTensor> want = verify::run_reference(g, in);
      const std::vector<ir::HostTensor> got = backend::run_on(cpu_backend(), g, in);
      EXPECT_LE(max_relative_error(got[0], want[0]), 1e-5) << "range " << range;
      EXPECT_TRUE(same_bytes(got[1], want[1])) << "range " << range;
    }
}

// The engine binds one buffer to the pool's input and output, so that a step moves only the
// appended slots; the result is the same as with two buffers.
TEST(PagedAttention, OneBufferForThePoolInAndOutGivesTheSameResult) {
  const Batch b = mixed_batch();
  const ir::KernelGraph g = graph_of(b);
  const std::vector<ir::HostTensor> in = inputs_of(g, b, 5, 1.0f);
  const std::vector<ir::HostTensor> want = verify::run_reference(g, in);
  backend::Backend& cpu = cpu_backend();
  std::vector<std::unique_ptr<backend::Buffer>> buffers;
  for (const ir::HostTensor& t : in) {
    buffers.push_back(cpu.allocate(t.bytes.size()));
    buffers.back()->write(t.bytes);
  }
  std::unique_ptr<backend::Buffer> out = cpu.allocate(want[0].bytes.size());
  std::vector<backend::Buffer*> inputs, outputs{out.get(), buffers[3].get()};
  for (auto& buffer : buffers) inputs.push_back(buffer.get());
  cpu.compile(g)->launch(inputs, outputs);
  ir::HostTensor got_out(want[0].type), got_pool(want[1].type);
  out->read(got_out.bytes);
  buffers[3]->read(got_pool.bytes);
  EXPECT_LE(max_relative_error(got_out, want[0]), 1e-5);
  EXPECT_TRUE(same_bytes(got_pool, want[1]));
}

// Through the one orchestration, like any graph: the search keeps the op as one kernel and works
// around it, the float check draws a valid table and positions for it, and the winner computes
// what the reference does.
TEST(PagedAttention, TheTunerSearchesAroundItChecksAndProfiles) {
  const Batch b = mixed_batch();
  // graph_of's op, its output projected by a matmul the search may work on.
  ir::KernelGraph projected;
  const std::vector<ir::TensorRef> out = add_attention(projected, b);
  projected.mark_output(
      projected.matmul(out[0], projected.input("w", {b.heads * b.d, 16}, ir::DType::f32)), "y");
  projected.mark_output(out[1], "pool_out");
  tune::OptimizeOptions options;
  options.cache_path = fresh_cache_db("paged_attention");
  options.search.budget_seconds = 2;
  options.profile.min_seconds = 0.01;
  const tune::OptimizeResult result = tune::optimize(projected, cpu_backend(), options);
  EXPECT_FALSE(result.cache_hit);
  EXPECT_EQ(result.entry.winner().status, "ok");
  EXPECT_TRUE(result.proof.equivalent) << result.proof.summary();
  int attention_nodes = 0;
  for (const ir::Node& node : result.chosen.nodes())
    attention_nodes += std::holds_alternative<ir::PagedAttentionOp>(node.op);
  EXPECT_EQ(attention_nodes, 1);
  const std::vector<ir::HostTensor> in = inputs_of(projected, b, 21, 1.0f);
  const std::vector<ir::HostTensor> want = verify::run_reference(projected, in);
  const std::vector<ir::HostTensor> got = backend::run_on(cpu_backend(), result.chosen, in);
  EXPECT_LE(max_relative_error(got[0], want[0]), 1e-4);
  EXPECT_TRUE(same_bytes(got[1], want[1]));
}

TEST(PagedAttention, BadTablesAndPositionsAreErrorsThatSayWhere) {
  const Batch good = mixed_batch();
  Batch outside = good, past = good, twice = good;
  outside.tables[3][2] = 10;  // the pool has blocks 0-9
  past.positions[3] = 16;     // 4 blocks of 4 tokens
  twice.positions[5] = 6;     // row 5 would store where row 1 does
  twice.tables[5] = {6, 2};
  const std::vector<std::pair<Batch, std::string>> cases{
      {outside, "paged_attention 'attn': table[3][2] = 10 is outside the pool's 10 blocks"},
      {past, "paged_attention 'attn': positions[3] = 16 is outside [-1, 16)"},
      {twice, "paged_attention 'attn': rows 1 and 5 both store to token 2 of pool block 2"}};
  for (const auto& [b, message] : cases) {
    const ir::KernelGraph g = graph_of(b);
    const std::vector<ir::HostTensor> in = inputs_of(g, b, 1, 1.0f);
    EXPECT_THAT(error_of([&] { verify::run_reference(g, in); }), testing::HasSubstr(message));
    EXPECT_THAT(error_of([&] { backend::run_on(cpu_backend(), g, in); }),
                testing::HasSubstr(message));
  }
}

TEST(PagedAttention, TypeRulesNameTheOperand) {
  ir::KernelGraph g;
  const ir::TensorRef q = g.input("q", {2, 4, 8}, ir::DType::f32);
  const ir::TensorRef k = g.input("k", {2, 3, 8}, ir::DType::f32);
  const ir::TensorRef pool32 = g.input("pool", {4, 6, 4, 8}, ir::DType::f32);
  const ir::TensorRef table = g.input("table", {2, 2}, ir::DType::i32);
  const ir::TensorRef positions = g.input("positions", {2}, ir::DType::i32);
  EXPECT_THAT(error_of([&] { g.paged_attention(q, k, k, pool32, table, positions, 4); }),
              testing::HasSubstr("4 heads are not a multiple of 3 kv heads"));
  const ir::TensorRef k2 = g.input("k2", {2, 2, 8}, ir::DType::f32);
  const ir::TensorRef pool = g.input("pool2", {4, 4, 4, 8}, ir::DType::f32);
  EXPECT_THAT(error_of([&] { g.paged_attention(q, k2, k2, pool, table, positions, 4); }),
              testing::HasSubstr("the pool (operand 3) must be f16 [blocks, 4, 4, 8]"));
  const ir::TensorRef pool16 = g.input("pool3", {4, 4, 4, 8}, ir::DType::f16);
  EXPECT_THAT(error_of([&] { g.paged_attention(q, k2, k2, pool16, table, table, 4); }),
              testing::HasSubstr("positions (operand 5) must be i32 [2]"));
  EXPECT_EQ(g.paged_attention(q, k2, k2, pool16, table, positions, 4).size(), 2u);
}

TEST(PagedAttention, JsonRoundTripKeepsTheBlockTokens) {
  const Batch b = mixed_batch();
  const ir::KernelGraph g = graph_of(b);
  const ir::KernelGraph back = ir::from_json(ir::to_json(g));
  EXPECT_EQ(ir::structural_hash(back), ir::structural_hash(g));
  Batch wider = b;
  wider.block_tokens = 8;
  wider.max_blocks = 2;
  EXPECT_NE(ir::structural_hash(graph_of(wider)), ir::structural_hash(g));
}

}  // namespace
}  // namespace yirage::cpu_test
