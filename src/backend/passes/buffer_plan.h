// Buffer planning, a graph pass for backends that run a kernel graph as steps over buffers: which
// buffer ("slot") holds each tensor. Graph inputs and marked outputs are the caller's buffers; a
// tensor marked as an output is computed straight into its output buffer (the first marking owns
// it; a further marking, or a marked graph input, is copied there afterwards); a reshape is its
// operand's buffer; a split's parts are views into its operand where the backend's rule allows;
// every other tensor gets a scratch buffer of its own, and a node that needs working memory gets
// one more after its results'. The cuda backend plans its programs with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "ir/ir.h"

namespace yirage::backend::passes {

enum class SlotKind { input, output, scratch, view };

struct Slot {
  SlotKind kind;
  int index;          // input or output number, scratch number, or a view's slot (an earlier one)
  size_t bytes;       // the size of the tensor it holds
  size_t offset = 0;  // a view's byte offset into its slot
  ir::TensorType type = {};  // the tensor it holds; a node's working memory: none
};

// How a split's parts may be held, by the backend's rule.
enum class SplitParts {
  copied,      // buffers of their own, written by the split's step
  contiguous,  // views: each part a contiguous run of the operand
  strided,     // views with the operand's strides, for steps that take strided operands
};

struct BufferRules {
  // The parts of split node `id`; null: always copied.
  std::function<SplitParts(const ir::KernelGraph&, int32_t id, const ir::SplitOp&)> split_parts;
  // Bytes of working memory node `id` needs besides its results; null: none.
  std::function<size_t(const ir::KernelGraph&, const ir::Node&)> working_bytes;
};

struct BufferPlan {
  std::vector<Slot> slots;
  std::map<ir::TensorRef, int> slot_of;  // every tensor's slot
  std::vector<int> output_slots;         // per graph output: its buffer's slot
  std::map<int, ir::Dims> view_strides;  // strided views: their operand's element strides
  std::vector<int> working_slot;         // per node: its working memory's slot, or -1
  // Whether the node's results are only slots of others (a reshape, a split held as views): it
  // needs no step of its own.
  std::vector<bool> aliased;
};

BufferPlan plan_buffers(const ir::KernelGraph& graph, const BufferRules& rules);

// Removes the scratch slots that no step reads or writes and no view points into, renumbering the
// rest and every step's slots (`step_slots`). A pass after planning may leave a scratch slot
// unwritten: a product whose add folds into its library call writes the add's slot instead.
void drop_unused_scratch(std::vector<Slot>& slots,
                         const std::vector<std::vector<int>*>& step_slots);

}  // namespace yirage::backend::passes
