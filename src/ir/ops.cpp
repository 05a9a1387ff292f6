#include "ir/ops.h"

namespace yirage::ir {

std::string_view unary_name(UnaryFn fn) {
  switch (fn) {
    case UnaryFn::exp: return "exp";
    case UnaryFn::silu: return "silu";
    case UnaryFn::gelu: return "gelu";
    case UnaryFn::relu: return "relu";
    case UnaryFn::sqrt: return "sqrt";
    case UnaryFn::rsqrt: return "rsqrt";
    case UnaryFn::square: return "square";
    case UnaryFn::neg: return "neg";
    case UnaryFn::reciprocal: return "reciprocal";
    case UnaryFn::mul_scalar: return "mul_scalar";
  }
  return "?";
}

std::string_view binary_name(BinaryFn fn) {
  switch (fn) {
    case BinaryFn::add: return "add";
    case BinaryFn::sub: return "sub";
    case BinaryFn::mul: return "mul";
    case BinaryFn::div: return "div";
    case BinaryFn::pow: return "pow";
  }
  return "?";
}

std::string_view reduce_name(ReduceFn fn) {
  switch (fn) {
    case ReduceFn::sum: return "sum";
    case ReduceFn::mean: return "mean";
    case ReduceFn::max: return "max";
  }
  return "?";
}

std::string_view rope_style_name(RopeStyle style) {
  return style == RopeStyle::interleaved ? "interleaved" : "neox";
}

std::string_view op_name(const Op& op) {
  return std::visit(
      Overloaded{
          [](const InputOp&) -> std::string_view { return "input"; },
          [](const MatmulOp&) -> std::string_view { return "matmul"; },
          [](const UnaryOp& u) { return unary_name(u.fn); },
          [](const BinaryOp& b) { return binary_name(b.fn); },
          [](const ReduceOp& r) { return reduce_name(r.fn); },
          [](const RmsNormOp&) -> std::string_view { return "rms_norm"; },
          [](const LayerNormOp&) -> std::string_view { return "layer_norm"; },
          [](const SoftmaxOp&) -> std::string_view { return "softmax"; },
          [](const ConcatOp&) -> std::string_view { return "concat"; },
          [](const SplitOp&) -> std::string_view { return "split"; },
          [](const ReshapeOp&) -> std::string_view { return "reshape"; },
          [](const PermuteOp&) -> std::string_view { return "permute"; },
          [](const EmbeddingOp&) -> std::string_view { return "embedding"; },
          [](const RopeOp&) -> std::string_view { return "rope"; },
          [](const QuantMatmulOp&) -> std::string_view { return "quant_matmul"; },
          [](const PagedAttentionOp&) -> std::string_view { return "paged_attention"; },
          [](const FusedOp&) -> std::string_view { return "fused"; },
      },
      op);
}

}  // namespace yirage::ir
