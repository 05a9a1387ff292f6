#include "backend/passes/buffer_plan.h"

namespace yirage::backend::passes {

BufferPlan plan_buffers(const ir::KernelGraph& graph, const BufferRules& rules) {
  BufferPlan plan;
  plan.working_slot.assign(graph.nodes().size(), -1);
  plan.aliased.assign(graph.nodes().size(), false);
  auto bytes_of = [&](ir::TensorRef t) {
    const ir::TensorType& type = graph.type(t);
    return size_t(ir::num_elements(type.dims)) * ir::dtype_size(type.dtype);
  };
  auto add_slot = [&](SlotKind kind, int index, ir::TensorRef t, size_t offset = 0) {
    plan.slots.push_back({kind, index, bytes_of(t), offset, graph.type(t)});
    return int(plan.slots.size() - 1);
  };
  const std::vector<ir::TensorRef> inputs = graph.inputs();
  for (size_t i = 0; i < inputs.size(); ++i)
    plan.slot_of[inputs[i]] = add_slot(SlotKind::input, int(i), inputs[i]);
  std::map<ir::TensorRef, int> output_slot;
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const ir::TensorRef t = graph.outputs()[i].tensor;
    plan.output_slots.push_back(add_slot(SlotKind::output, int(i), t));
    output_slot.emplace(t, plan.output_slots.back());
  }
  int scratch = 0;
  for (size_t id = 0; id < graph.nodes().size(); ++id) {
    const ir::Node& node = graph.nodes()[id];
    if (std::holds_alternative<ir::InputOp>(node.op)) continue;
    if (std::holds_alternative<ir::ReshapeOp>(node.op)) {
      plan.slot_of[{int32_t(id), 0}] = plan.slot_of.at(node.inputs[0]);
      plan.aliased[id] = true;
      continue;
    }
    if (const auto* split = std::get_if<ir::SplitOp>(&node.op);
        split && rules.split_parts &&
        rules.split_parts(graph, int32_t(id), *split) != SplitParts::copied) {
      const bool contiguous =
          rules.split_parts(graph, int32_t(id), *split) == SplitParts::contiguous;
      const int whole = plan.slot_of.at(node.inputs[0]);
      const ir::Dims strides = ir::row_major_strides(graph.type(node.inputs[0]).dims);
      const size_t step =
          size_t(strides[size_t(split->dim)]) * ir::dtype_size(graph.type(node.inputs[0]).dtype);
      size_t offset = 0;
      for (size_t port = 0; port < node.outputs.size(); ++port) {
        const ir::TensorRef t{int32_t(id), int32_t(port)};
        plan.slot_of[t] = add_slot(SlotKind::view, whole, t, offset);
        if (!contiguous) plan.view_strides[plan.slot_of[t]] = strides;
        offset += size_t(split->sizes[port]) * step;
      }
      plan.aliased[id] = true;
      continue;
    }
    for (size_t port = 0; port < node.outputs.size(); ++port) {
      const ir::TensorRef t{int32_t(id), int32_t(port)};
      auto found = output_slot.find(t);
      plan.slot_of[t] =
          found != output_slot.end() ? found->second : add_slot(SlotKind::scratch, scratch++, t);
    }
    if (const size_t extra = rules.working_bytes ? rules.working_bytes(graph, node) : 0) {
      plan.slots.push_back({SlotKind::scratch, scratch++, extra});
      plan.working_slot[id] = int(plan.slots.size() - 1);
    }
  }
  return plan;
}

void drop_unused_scratch(std::vector<Slot>& slots,
                         const std::vector<std::vector<int>*>& step_slots) {
  std::vector<bool> used(slots.size());
  for (const std::vector<int>* step : step_slots)
    for (int slot : *step) used[size_t(slot)] = true;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].kind != SlotKind::scratch) used[i] = true;
    if (slots[i].kind == SlotKind::view) used[size_t(slots[i].index)] = true;
  }
  std::vector<int> renumbered(slots.size(), -1);
  std::vector<Slot> kept;
  int scratch = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!used[i]) continue;
    Slot slot = slots[i];
    if (slot.kind == SlotKind::scratch) slot.index = scratch++;
    if (slot.kind == SlotKind::view) slot.index = renumbered[size_t(slot.index)];
    renumbered[i] = int(kept.size());
    kept.push_back(slot);
  }
  for (std::vector<int>* step : step_slots)
    for (int& slot : *step) slot = renumbered[size_t(slot)];
  slots = std::move(kept);
}

}  // namespace yirage::backend::passes
