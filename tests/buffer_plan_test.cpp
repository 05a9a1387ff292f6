// The buffer-planning pass (backend/passes/buffer_plan.h): its slots, and a program over them
// that runs every node on the planned buffers computes what the reference executor computes.
#include <cstring>
#include <map>

#include <gtest/gtest.h>

#include "backend/passes/buffer_plan.h"
#include "test_util.h"
#include "verify/verify.h"

namespace yirage {
namespace {

using backend::passes::BufferPlan;
using backend::passes::BufferRules;
using backend::passes::plan_buffers;
using backend::passes::Slot;
using backend::passes::SlotKind;
using backend::passes::SplitParts;
using ir::DType;

// x [1, 96] split into [1, 32] and [1, 64] (contiguous: every dim before the split's is 1), each
// part negated, the first also reshaped; outputs: the second part twice and the input itself.
ir::KernelGraph split_graph() {
  ir::KernelGraph g;
  auto x = g.input("x", {1, 96}, DType::f32);
  auto parts = g.split(x, 1, {32, 64});
  g.mark_output(g.neg(g.reshape(parts[0], {4, 8})), "first");
  auto second = g.neg(parts[1]);
  g.mark_output(second, "second");
  g.mark_output(second, "again");
  g.mark_output(x, "x");
  return g;
}

BufferRules views_where_contiguous() {
  return {.split_parts = [](const ir::KernelGraph&, int32_t,
                            const ir::SplitOp&) { return SplitParts::contiguous; },
          .working_bytes = {}};
}

// Runs every node that needs a step as a one-node graph over the planned buffers (views read
// and written in place), copies outputs held elsewhere into their own buffers, and returns the
// output buffers.
std::vector<ir::HostTensor> run_on_plan(const ir::KernelGraph& g, const BufferPlan& plan,
                                        const std::vector<ir::HostTensor>& inputs) {
  std::vector<std::vector<std::byte>> memory(plan.slots.size());
  for (size_t s = 0; s < plan.slots.size(); ++s)
    if (plan.slots[s].kind != SlotKind::view) memory[s].resize(plan.slots[s].bytes);
  auto bytes_at = [&](int slot) -> std::byte* {
    const Slot& s = plan.slots[size_t(slot)];
    return s.kind == SlotKind::view ? memory[size_t(s.index)].data() + s.offset
                                    : memory[size_t(slot)].data();
  };
  for (size_t i = 0; i < inputs.size(); ++i)
    std::memcpy(bytes_at(plan.slot_of.at(g.inputs()[i])), inputs[i].bytes.data(),
                inputs[i].bytes.size());
  for (size_t id = 0; id < g.nodes().size(); ++id) {
    const ir::Node& node = g.nodes()[id];
    if (std::holds_alternative<ir::InputOp>(node.op) || plan.aliased[id]) continue;
    ir::KernelGraph one;
    std::vector<ir::TensorRef> operands;
    std::vector<ir::HostTensor> values;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ir::TensorType& t = g.type(node.inputs[i]);
      operands.push_back(one.input("in" + std::to_string(i), t.dims, t.dtype));
      values.emplace_back(t);
      std::memcpy(values.back().bytes.data(), bytes_at(plan.slot_of.at(node.inputs[i])),
                  values.back().bytes.size());
    }
    const std::vector<ir::TensorRef> results = one.add_node(node.op, operands);
    for (ir::TensorRef r : results) one.mark_output(r);
    const std::vector<ir::HostTensor> out = verify::run_reference(one, values);
    for (size_t port = 0; port < out.size(); ++port)
      std::memcpy(bytes_at(plan.slot_of.at({int32_t(id), int32_t(port)})), out[port].bytes.data(),
                  out[port].bytes.size());
  }
  std::vector<ir::HostTensor> outputs;
  for (size_t o = 0; o < g.outputs().size(); ++o) {
    outputs.emplace_back(g.type(g.outputs()[o].tensor));
    const int from = plan.slot_of.at(g.outputs()[o].tensor);
    std::memcpy(outputs.back().bytes.data(), bytes_at(from), outputs.back().bytes.size());
  }
  return outputs;
}

TEST(BufferPlan, SplitPartsAreViewsReshapesShareAndTheFirstMarkingOwnsAnOutput) {
  const ir::KernelGraph g = split_graph();
  const BufferPlan plan = plan_buffers(g, views_where_contiguous());
  const int x = plan.slot_of.at(g.inputs()[0]);
  EXPECT_EQ(plan.slots[size_t(x)].kind, SlotKind::input);
  int32_t split = 0;
  while (!std::holds_alternative<ir::SplitOp>(g.nodes()[size_t(split)].op)) ++split;
  const ir::TensorRef part0{split, 0};
  const Slot& view0 = plan.slots[size_t(plan.slot_of.at(part0))];
  const Slot& view1 = plan.slots[size_t(plan.slot_of.at({part0.node, 1}))];
  EXPECT_EQ(view0.kind, SlotKind::view);
  EXPECT_EQ(view0.index, x);
  EXPECT_EQ(view0.offset, 0u);
  EXPECT_EQ(view1.offset, 32 * sizeof(float));
  EXPECT_EQ(view1.bytes, 64 * sizeof(float));
  // "second" is computed into output 1; "again" and "x" are copied into outputs 2 and 3.
  EXPECT_EQ(plan.slot_of.at(g.outputs()[1].tensor), plan.output_slots[1]);
  EXPECT_NE(plan.slot_of.at(g.outputs()[2].tensor), plan.output_slots[2]);
  EXPECT_NE(plan.slot_of.at(g.outputs()[3].tensor), plan.output_slots[3]);
  EXPECT_TRUE(plan.aliased[size_t(part0.node)]);  // the split needs no step
}

TEST(BufferPlan, AProgramOverThePlannedBuffersComputesWhatTheReferenceDoes) {
  const ir::KernelGraph g = split_graph();
  const std::vector<ir::HostTensor> inputs = test_util::random_inputs(g, 3);
  const std::vector<ir::HostTensor> want = verify::run_reference(g, inputs);
  for (const BufferRules& rules : {views_where_contiguous(), BufferRules{}}) {
    const std::vector<ir::HostTensor> got = run_on_plan(g, plan_buffers(g, rules), inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t o = 0; o < got.size(); ++o) EXPECT_EQ(got[o].bytes, want[o].bytes) << o;
  }
}

TEST(BufferPlan, WorkingMemoryAndUnusedScratchAreRenumbered) {
  ir::KernelGraph g;
  auto x = g.input("x", {8}, DType::f32);
  auto a = g.neg(x);
  g.mark_output(g.neg(a), "y");
  const BufferRules rules{.split_parts = {},
                          .working_bytes = [&](const ir::KernelGraph&, const ir::Node& n) {
                            return size_t(&n == &g.nodes()[size_t(a.node)] ? 100 : 0);
                          }};
  BufferPlan plan = plan_buffers(g, rules);
  // input, output, a's scratch, a's working memory
  ASSERT_EQ(plan.slots.size(), 4u);
  EXPECT_EQ(plan.working_slot[size_t(a.node)], 3);
  EXPECT_EQ(plan.slots[3].bytes, 100u);
  // A step list that never touches a's result: its scratch goes, the working memory is renumbered.
  std::vector<int> first{0, 3}, second{0, 1};
  backend::passes::drop_unused_scratch(plan.slots, {&first, &second});
  ASSERT_EQ(plan.slots.size(), 3u);
  EXPECT_EQ(first, (std::vector<int>{0, 2}));
  EXPECT_EQ(plan.slots[2].index, 0);  // the only scratch left is scratch 0
}

}  // namespace
}  // namespace yirage
