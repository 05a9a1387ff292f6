// Kernel-level matmuls as cuBLAS calls, and the two fusions the library offers them: an add that
// is a product's only reader folds into the call's epilogue, and products of one A and one size
// run as one grouped call. Library-specific, so these passes stay with the cuda backend.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "backend/cuda/codegen_util.h"

namespace yirage::backend::cuda::detail {
namespace {

// An add that can fold into the library product it reads (the call then writes the sum): the
// product is one of its inputs, read by nothing else and no output, and the addend, its other
// input, has the product's type (no broadcast) and is computed before it, so that it exists when
// the call runs. Why: the add was a kernel of its own after the call (the Llama MLP's residual),
// and the library's epilogue does it for free.
struct FoldedAdd {
  ir::TensorRef product, addend;
};
std::optional<FoldedAdd> folded_add(const ir::KernelGraph& graph, const ir::Node& node,
                                    const std::map<ir::TensorRef, size_t>& products) {
  const auto* binary = std::get_if<ir::BinaryOp>(&node.op);
  if (!binary || binary->fn != ir::BinaryFn::add) return std::nullopt;
  for (size_t side = 0; side < 2; ++side) {
    const ir::TensorRef product = node.inputs[side], other = node.inputs[1 - side];
    if (!products.contains(product) || other.node >= product.node || other == product) continue;
    if (graph.type(other) != graph.type(product)) continue;
    int readers = 0;
    for (const ir::Node& n : graph.nodes())
      readers += int(std::count(n.inputs.begin(), n.inputs.end(), product));
    for (const ir::GraphOutput& out : graph.outputs()) readers += out.tensor == product;
    if (readers == 1) return FoldedAdd{product, other};
  }
  return std::nullopt;
}

// The library call that product `node` (lowered as `gemm`, reading slots `in`) can join as one
// more member of its group (LibraryGemm::group): an earlier call of one matrix, adding nothing,
// of the same sizes and dtype, that reads the same A, where this product's B exists by the time
// that call runs (a graph input, or computed before its first product). The product's own slot
// is fresh, so writing it earlier changes nothing. Why: a gated MLP's gate and up each read a
// weight of 32 MB; as one batch its library graph went from 25.7 to 22.4 µs at 64 rows and from
// 27.0 to 20.7 µs at 8 on the H200 (docs/design/cuda-findings.md). Not profiled; a
// likely reason is that one call of a few rows leaves cuBLAS few blocks, and two calls pay two
// ramps and tails over weights that, 64 MB together, never stay in the 60 MB L2.
constexpr int64_t kMaxGroup = 8;
std::optional<size_t> group_to_join(const ir::KernelGraph& graph, const ir::Node& node,
                                    const LibraryGemm& gemm, const std::vector<int>& in,
                                    const std::map<ir::TensorRef, size_t>& products,
                                    const std::vector<KernelLaunch>& steps) {
  if (gemm.batches != 1) return std::nullopt;
  const ir::TensorRef b = node.inputs[1];
  const bool b_is_input = std::holds_alternative<ir::InputOp>(graph.nodes()[size_t(b.node)].op);
  // Ordered by node, so the first entry of a step is its first product, the one it runs at.
  std::set<size_t> seen;
  for (const auto& [product, step] : products) {
    if (!seen.insert(step).second) continue;
    const KernelLaunch& call = steps[step];
    const LibraryGemm& other = *call.gemm;
    if (other.batches != 1 || other.adds || other.group >= kMaxGroup || call.args[0] != in[0] ||
        std::tie(other.m, other.n, other.k, other.dtype) !=
            std::tie(gemm.m, gemm.n, gemm.k, gemm.dtype))
      continue;
    if (b_is_input || b.node < product.node) return step;
  }
  return std::nullopt;
}

}  // namespace

LibraryCalls::LibraryCalls(const ir::KernelGraph& graph, const CodegenOptions& options)
    : graph_(graph), options_(options) {}

bool LibraryCalls::lower(const ir::Node& node, int32_t id, const std::vector<int>& in,
                         const std::vector<int>& out, const passes::BufferPlan& plan,
                         std::vector<KernelLaunch>& steps) {
  const std::optional<FoldedAdd> fold =
      options_.fold_adds ? folded_add(graph_, node, products_) : std::nullopt;
  if (fold && !plan.view_strides.contains(plan.slot_of.at(fold->addend)) &&
      steps[products_.at(fold->product)].gemm->group == 1) {
    KernelLaunch& call = steps[products_.at(fold->product)];
    call.gemm->adds = true;
    call.args = {call.args[0], call.args[1], out[0], plan.slot_of.at(fold->addend)};
    call.what = fmt::format("node '{}' (matmul, cuBLAS, adding node '{}')",
                            graph_.nodes()[size_t(fold->product.node)].name, node.name);
    return true;
  }
  std::optional<LibraryGemm> gemm;
  if (!options_.library_matmul || !(gemm = library_gemm(graph_, node))) return false;
  const std::optional<size_t> joined =
      options_.group_products ? group_to_join(graph_, node, *gemm, in, products_, steps)
                              : std::nullopt;
  if (joined) {
    KernelLaunch& call = steps[*joined];
    call.gemm->group += 1;
    call.args.insert(call.args.end(), {in[1], out[0]});
    call.what += fmt::format(" and node '{}' (sharing A, one cuBLAS batch)", node.name);
    products_[{id, 0}] = *joined;
    return true;
  }
  KernelLaunch call;
  call.gemm = gemm;
  call.name = "cublas_gemm";
  call.args = {in[0], in[1], out[0]};
  call.what = fmt::format("node '{}' (matmul, cuBLAS)", node.name);
  products_[{id, 0}] = steps.size();
  steps.push_back(std::move(call));
  return true;
}

}  // namespace yirage::backend::cuda::detail
