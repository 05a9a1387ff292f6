#include "verify/numerics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

#include <fmt/format.h>

#include "support/error.h"
#include "verify/verify.h"

namespace yirage::verify {
namespace {

// Where the stress distributions put the dot products of the first matmul each input reaches:
// `large` gives them a standard deviation of kLargeLogit / 3, so a row of thousands spans about
// ±30…±80.
constexpr double kLargeLogit = 60;
constexpr double kOutlierFactor = 30;
constexpr int kOutlierOneIn = 64;  // one last-dim channel in this many carries outliers

// Uniform in [0, 1) with 24 random bits, two per 64-bit draw: the suite's weights are millions
// of elements, and this keeps filling them a small part of a float check.
class Unit {
 public:
  explicit Unit(std::mt19937_64& rng) : rng_(rng) {}
  float operator()() {
    if (!left_) bits_ = rng_(), left_ = 2;
    const uint64_t b = (bits_ >> (--left_ ? 40 : 16)) & 0xffffff;
    return float(b) * 0x1p-24f;
  }

 private:
  std::mt19937_64& rng_;
  uint64_t bits_ = 0;
  int left_ = 0;
};

// ln of the dtype's largest finite value: exp overflows just above it.
double log_max(ir::DType t) {
  return t == ir::DType::f16 ? std::log(65504.0)
                             : std::log(double(std::numeric_limits<float>::max()));
}

int normalized_axis(int dim, size_t rank) {
  return dim < 0 ? dim + int(rank) : dim;
}

int64_t node_reduction(const ir::KernelGraph& g, const ir::Node& node) {
  auto in_dims = [&](size_t i) { return g.type(node.inputs.at(i)).dims; };
  return std::visit(
      [&](const auto& op) -> int64_t {
        using T = std::decay_t<decltype(op)>;
        if constexpr (std::is_same_v<T, ir::MatmulOp> || std::is_same_v<T, ir::QuantMatmulOp>) {
          return in_dims(0).back();
        } else if constexpr (std::is_same_v<T, ir::ReduceOp> || std::is_same_v<T, ir::SoftmaxOp>) {
          const ir::Dims d = in_dims(0);
          return d.at(size_t(normalized_axis(op.dim, d.size())));
        } else if constexpr (std::is_same_v<T, ir::RmsNormOp> ||
                             std::is_same_v<T, ir::LayerNormOp>) {
          return ir::num_elements(op.normalized_shape);
        } else {
          return 1;
        }
      },
      node.op);
}

bool is_matmul(const ir::Node& node) {
  return std::holds_alternative<ir::MatmulOp>(node.op) ||
         std::holds_alternative<ir::QuantMatmulOp>(node.op);
}

}  // namespace

const char* distribution_name(InputDistribution d) {
  switch (d) {
    case InputDistribution::uniform: return "uniform";
    case InputDistribution::large: return "large";
    case InputDistribution::outliers: return "outliers";
    case InputDistribution::near_overflow: return "near_overflow";
  }
  return "?";
}

int64_t reduction_length(const ir::KernelGraph& graph) {
  int64_t k = 1;
  for (const ir::Node& node : graph.nodes())
    if (!std::holds_alternative<ir::InputOp>(node.op)) k = std::max(k, node_reduction(graph, node));
  return k;
}

std::vector<ir::HostTensor> make_inputs(const ir::KernelGraph& graph, InputDistribution d,
                                        uint64_t seed) {
  // The inner dim of the first matmul on each path from a node, the shortest of them; 0 when no
  // path reaches one. An input is scaled so that the product, not the input, lands in the stress
  // range (a norm between them keeps the scale of its weight), and the first matmul it reaches is
  // the one whose products feed an exp or a sum soonest.
  const std::vector<ir::Node>& nodes = graph.nodes();
  std::vector<int64_t> first_k(nodes.size(), 0);
  for (size_t id = nodes.size(); id-- > 0;) {
    const int64_t k = is_matmul(nodes[id]) ? node_reduction(graph, nodes[id]) : first_k[id];
    if (k == 0) continue;
    for (const ir::TensorRef& t : nodes[id].inputs) {
      int64_t& f = first_k[size_t(t.node)];
      f = f == 0 ? k : std::min(f, k);
    }
  }

  std::mt19937_64 rng(seed ^ (0x9e3779b97f4a7c15ull * (uint64_t(d) + 1)));
  Unit unit(rng);
  std::vector<ir::HostTensor> inputs;
  for (const ir::TensorRef& in : graph.inputs()) {
    ir::HostTensor& t = inputs.emplace_back(graph.type(in));
    if (!ir::is_float(t.type.dtype)) {
      ir::fill_random(t, rng);
      continue;
    }
    const bool matmul = first_k[size_t(in.node)] > 0;
    const double k = double(first_k[size_t(in.node)]);
    const int64_t n = t.size();
    switch (d) {
      case InputDistribution::uniform:
        for (int64_t i = 0; i < n; ++i) t.set(i, 2 * unit() - 1);
        break;
      case InputDistribution::large: {
        // Two inputs uniform in ±s give a length-k dot product of standard deviation s²·√k / 3.
        const float s = float(matmul ? std::sqrt(kLargeLogit / std::sqrt(k)) : kLargeLogit);
        for (int64_t i = 0; i < n; ++i) t.set(i, s * (2 * unit() - 1));
        break;
      }
      case InputDistribution::outliers: {
        const int64_t channels = t.type.dims.empty() ? 1 : t.type.dims.back();
        std::vector<float> factor(size_t(channels), 1.0f);
        if (t.type.dims.size() >= 2) {
          for (float& f : factor)
            if (rng() % kOutlierOneIn == 0) f = float(kOutlierFactor);
          factor[size_t(rng() % uint64_t(channels))] = float(kOutlierFactor);
        }
        for (int64_t i = 0; i < n; ++i) t.set(i, factor[size_t(i % channels)] * (2 * unit() - 1));
        break;
      }
      case InputDistribution::near_overflow: {
        // Positive within ±5% of s, so that a length-k dot product of two is about k·s², all
        // terms adding up: at log(max) every exp of it is at the edge of overflow.
        const double target = log_max(t.type.dtype);
        const float s = float(matmul ? std::sqrt(target / k) : target);
        for (int64_t i = 0; i < n; ++i) t.set(i, s * (0.95f + 0.1f * unit()));
        break;
      }
    }
  }
  ir::make_paged_attention_indices_valid(graph, inputs);
  return inputs;
}

double machine_epsilon(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::f16: return 0x1p-10;
    case ir::DType::bf16: return 0x1p-7;
    default: return 0x1p-23;
  }
}

double magnitude(InputDistribution d, ir::DType dtype) {
  switch (d) {
    case InputDistribution::uniform: return 1;
    case InputDistribution::large: return kLargeLogit;
    case InputDistribution::outliers: return kOutlierFactor;
    case InputDistribution::near_overflow: return log_max(dtype);
  }
  return 1;
}

// Two sources of difference, both measured against the output's scale (compare()):
//  - storage: the reference rounds every intermediate tensor to the dtype, where a fused kernel's
//    tiles stay f32, so the two differ by a few roundings of the dtype: 8·eps(dtype);
//  - accumulation: the reference sums in double, a candidate in f32 and in its own order. Each
//    addition to a partial sum of the output's scale errs by up to eps(f32) of it, and K such
//    errors add up like a random walk, about eps(f32)·√K; 32 of those allow for several
//    reductions in a row (a norm before a matmul, a product of two sums) and for the tail of
//    thousands of outputs.
// For f32 at K = 2048 that is 1.8e-4 of the scale; for f16 the storage term dominates (7.8e-3).
// Both are relative errors of intermediate values; the stress distributions drive those to a
// magnitude M, where the same relative error is M times larger in absolute terms, and exp turns
// an absolute error of a logit into a relative error of its output (softmax of logits of ±80),
// as a norm divides one by the spread of its row (layer norm of values far from their mean). So
// their tolerance is M times larger: in bf16 at log(max) that leaves only the inf/NaN check,
// which is all that 3 significant digits of a logit near 88 can support.
double tolerance(ir::DType dtype, int64_t reduction_length, InputDistribution d) {
  const double eps32 = machine_epsilon(ir::DType::f32);
  return magnitude(d, dtype) *
         (8 * machine_epsilon(dtype) +
          32 * eps32 * std::sqrt(double(std::max<int64_t>(reduction_length, 1))));
}

std::string Comparison::summary() const {
  std::string s;
  if (reference_non_finite > 0)
    s = fmt::format(
        "the input graph overflows here ({} non-finite value{}), so nothing is held "
        "against the candidate; ",
        reference_non_finite, reference_non_finite == 1 ? "" : "s");
  if (new_non_finite > 0)
    s += fmt::format("{} non-finite value{} where the input graph is finite ({}); ", new_non_finite,
                     new_non_finite == 1 ? "" : "s", first_new_non_finite);
  if (rounding_error > 0)
    s += fmt::format(
        "against the input graph in f32, from which the input graph itself is {:.2g} away "
        "(tolerance {:g}x that); ",
        rounding_error, kRoundingAllowance);
  return s + fmt::format("max error {:.3g}, tolerance {:.2g}: {}", max_error, tolerance,
                         passed ? "ok" : "FAILED");
}

namespace {

// `graph` with its f16/bf16 inputs as f32, so that every op computes and rounds in f32; nullopt
// where an op does not accept that (its type rules name other dtypes) or nothing widens.
std::optional<ir::KernelGraph> widened_to_f32(const ir::KernelGraph& graph) {
  ir::KernelGraph wide;
  std::map<ir::TensorRef, ir::TensorRef> mapped;
  bool widened = false;
  try {
    for (size_t id = 0; id < graph.nodes().size(); ++id) {
      const ir::Node& node = graph.nodes()[id];
      if (std::holds_alternative<ir::InputOp>(node.op)) {
        ir::DType t = node.outputs.at(0).dtype;
        if (t == ir::DType::f16 || t == ir::DType::bf16) t = ir::DType::f32, widened = true;
        mapped[{int32_t(id), 0}] = wide.input(node.name, node.outputs[0].dims, t);
        continue;
      }
      std::vector<ir::TensorRef> inputs;
      for (const ir::TensorRef& in : node.inputs) inputs.push_back(mapped.at(in));
      const std::vector<ir::TensorRef> outs = wide.add_node(node.op, inputs, node.name);
      for (size_t p = 0; p < outs.size(); ++p) mapped[{int32_t(id), int32_t(p)}] = outs[p];
    }
    for (const ir::GraphOutput& o : graph.outputs()) {
      const ir::TensorRef t = mapped.at(o.tensor);
      if (wide.type(t).dtype != ir::DType::f32) return std::nullopt;
      wide.mark_output(t, o.name);
    }
  } catch (const Error&) {
    return std::nullopt;
  }
  if (!widened) return std::nullopt;
  return wide;
}

}  // namespace

std::optional<WidenedReference> widened_reference(const ir::KernelGraph& graph,
                                                  const std::vector<ir::HostTensor>& inputs,
                                                  const std::vector<ir::HostTensor>& outputs) {
  const std::optional<ir::KernelGraph> wide = widened_to_f32(graph);
  if (!wide) return std::nullopt;
  std::vector<ir::HostTensor> wide_inputs;
  const std::vector<ir::TensorRef> refs = wide->inputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ir::HostTensor t(wide->type(refs.at(i)));
    for (int64_t e = 0; e < t.size(); ++e) t.set(e, inputs[i].get(e));
    wide_inputs.push_back(std::move(t));
  }
  WidenedReference r;
  r.outputs = run_reference(*wide, wide_inputs);
  // The outputs in their dtype against the widened ones, as compare() measures a candidate.
  r.rounding_error = compare(outputs, r.outputs, 1).max_error;
  return r;
}

Comparison compare_within_rounding(
    const std::vector<ir::HostTensor>& actual, const std::vector<ir::HostTensor>& expected,
    int64_t reduction_length, InputDistribution d,
    const std::function<const std::optional<WidenedReference>&()>& widened) {
  const Comparison c = compare(actual, expected, reduction_length, d);
  if (c.passed || c.new_non_finite > 0 || c.reference_non_finite > 0) return c;
  const std::optional<WidenedReference>& wide = widened();
  if (!wide || wide->rounding_error <= c.tolerance / kRoundingAllowance) return c;
  return compare(actual, wide->outputs, reduction_length, d, wide->rounding_error);
}

Comparison compare(const std::vector<ir::HostTensor>& actual,
                   const std::vector<ir::HostTensor>& expected, int64_t reduction_length,
                   InputDistribution d, double rounding_error) {
  Comparison c;
  for (const ir::HostTensor& e : expected)
    c.tolerance = std::max(c.tolerance, tolerance(e.type.dtype, reduction_length, d));
  if (kRoundingAllowance * rounding_error > c.tolerance) {
    c.tolerance = kRoundingAllowance * rounding_error;
    c.rounding_error = rounding_error;
  }
  for (size_t o = 0; o < expected.size(); ++o) {
    const ir::HostTensor &a = actual.at(o), &e = expected[o];
    double sum_squares = 0;
    int64_t finite = 0;
    for (int64_t i = 0; i < e.size(); ++i)
      if (const double v = e.get(i); std::isfinite(v)) sum_squares += v * v, ++finite;
    const double rms = std::max(finite ? std::sqrt(sum_squares / double(finite)) : 0.0,
                                double(std::numeric_limits<float>::min()));
    for (int64_t i = 0; i < e.size(); ++i) {
      const double ev = e.get(i), av = a.get(i);
      if (!std::isfinite(ev)) {
        ++c.reference_non_finite;
      } else if (!std::isfinite(av)) {
        if (c.new_non_finite++ == 0)
          c.first_new_non_finite =
              fmt::format("output {} element {}: {} where the input graph gives {}", o, i, av, ev);
      } else {
        c.max_error = std::max(c.max_error, std::fabs(av - ev) / (std::fabs(ev) + rms));
      }
    }
  }
  c.passed = c.reference_non_finite > 0 || (c.new_non_finite == 0 && c.max_error <= c.tolerance);
  return c;
}

}  // namespace yirage::verify
