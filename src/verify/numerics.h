// Numerically safe acceptance: the input distributions a candidate is float-checked on, the
// tolerance it is held to, and the comparison of its outputs with the input graph's.
//
// Fingerprints prove that a candidate computes the same real function; they cannot see that it
// computes it unsafely, e.g. softmax as exp(x) / Σexp(x) without subtracting the row max, which
// is equal to the input graph's softmax until exp overflows. So both programs also run in their
// own dtype on inputs that stress the range: a candidate that gives inf or NaN where the input
// graph does not is rejected, whatever its error elsewhere. The search's float check and the
// tuner's output check both use this.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace yirage::verify {

enum class InputDistribution {
  uniform,        // [-1, 1): the ordinary case
  large,          // symmetric, scaled so that dot products reach ±30…±80
  outliers,       // [-1, 1) with a few last-dim channels 30 times larger, as LLM activations have
  near_overflow,  // positive, scaled so that dot products (or the values) sit at log(max dtype)
};
inline constexpr InputDistribution kAllDistributions[] = {
    InputDistribution::uniform, InputDistribution::large, InputDistribution::outliers,
    InputDistribution::near_overflow};
const char* distribution_name(InputDistribution d);

// The longest reduction in `graph`: matmul inner dims, reduce and softmax dims, norm sizes; 1
// when it has none: what the tolerance grows with.
int64_t reduction_length(const ir::KernelGraph& graph);

// One input per graph input, in KernelGraph::inputs() order, drawn from `d`; the same (graph, d,
// seed) gives the same inputs. The stress distributions scale an input by the inner dim of the
// first matmul it reaches, so that the products land in their range. Integer inputs are drawn as
// ir::fill_random draws them whatever d.
std::vector<ir::HostTensor> make_inputs(const ir::KernelGraph& graph, InputDistribution d,
                                        uint64_t seed);

// Machine epsilon (the spacing at 1): 2^-23 for f32, 2^-10 for f16, 2^-7 for bf16.
double machine_epsilon(ir::DType dtype);

// The magnitude `d` drives values to in `dtype`: 1 for uniform, the scale of the others.
double magnitude(InputDistribution d, ir::DType dtype);

// The largest error compare() accepts for outputs of `dtype` from a graph whose longest reduction
// is `reduction_length`, on inputs from `d` (the formula is explained in numerics.cpp).
double tolerance(ir::DType dtype, int64_t reduction_length,
                 InputDistribution d = InputDistribution::uniform);

// A candidate's outputs against the input graph's, on one set of inputs.
struct Comparison {
  double max_error = 0;  // max |actual - expected| / (|expected| + rms), where both are finite
  double tolerance = 0;  // the largest over the outputs' dtypes, or the rounding allowance
  // Set when the comparison was against the input graph widened to f32 (widened_reference):
  // how far the input graph's own outputs lie from that, else 0.
  double rounding_error = 0;
  int64_t new_non_finite = 0;        // elements non-finite in the candidate only
  int64_t reference_non_finite = 0;  // elements non-finite in the input graph (not compared)
  std::string first_new_non_finite;  // "output 0 element 12: nan where the input graph gives 0.5"
  // max_error <= tolerance and no new non-finite element; or the input graph overflows on these
  // inputs itself, and then nothing is held against the candidate: the input graph is no oracle
  // outside its range, and where an overflow spreads depends on the order of operations, which a
  // candidate may change (a row sum that is inf gives 0 after e / Σe, and NaN after (e·V) / Σe).
  bool passed = false;
  // Rejected for inf or NaN where the input graph is finite, on inputs where it is all finite.
  bool new_overflow() const { return new_non_finite > 0 && reference_non_finite == 0; }
  // One clause: "max error 1.2e-07, tolerance 2.3e-05: ok", or what failed.
  std::string summary() const;
};

// `rms` is the root mean square of the output's finite expected values: errors are measured
// against the output's scale, so an element near zero in a sum of large terms is not held to a
// relative error its rounding cannot meet. Elements the input graph gives as inf or NaN are not
// compared: a candidate may match them (see Comparison::passed).
// With `rounding_error` (a WidenedReference's, `expected` its outputs), the tolerance is at least
// kRoundingAllowance times it.
Comparison compare(const std::vector<ir::HostTensor>& actual,
                   const std::vector<ir::HostTensor>& expected, int64_t reduction_length,
                   InputDistribution d = InputDistribution::uniform, double rounding_error = 0);

// The input graph with every float input and op widened to f32, on the same inputs, and how far
// the input graph's outputs in its own dtype (`outputs`) lie from it by compare()'s measure: what
// the dtype's rounding alone costs here. tolerance()'s formula assumes a well-conditioned graph,
// where a rounding moves an output by about as much; a norm over values far from their mean, or
// exp of large logits, magnifies it, and then the input graph in its dtype is a poor oracle: a
// candidate that keeps its tiles in f32 is as far from it as it is from exact. Such a candidate
// is compared with the widened graph instead, allowed kRoundingAllowance times the input graph's
// own error. nullopt for graphs already in f32 and for those whose ops do not widen (quantized
// weights, an f16 KV pool).
struct WidenedReference {
  std::vector<ir::HostTensor> outputs;
  double rounding_error = 0;
};
std::optional<WidenedReference> widened_reference(const ir::KernelGraph& graph,
                                                  const std::vector<ir::HostTensor>& inputs,
                                                  const std::vector<ir::HostTensor>& outputs);
inline constexpr double kRoundingAllowance = 2;

// compare(); and where `actual` misses the formula's tolerance with finite values and the input
// graph is ill-conditioned here (its own distance from the widened graph over the tolerance /
// kRoundingAllowance), compare() against the widened graph instead. `widened` gives
// widened_reference's result for these inputs and `expected`; it is called only in that case, so
// that a caller makes the f32 run lazily, once per input set.
Comparison compare_within_rounding(
    const std::vector<ir::HostTensor>& actual, const std::vector<ir::HostTensor>& expected,
    int64_t reduction_length, InputDistribution d,
    const std::function<const std::optional<WidenedReference>&()>& widened);

}  // namespace yirage::verify
