// The equivalence check: kernel graphs over fingerprints, trials, and the false-accept bound.
//
// The bound. Per output element the two programs compute rational functions N_a/D_a and N_b/D_b
// in the inputs, the UF outputs and the exp atoms ω^e, each a variable of degree 1, with degrees
// bounded along the graph (fingerprint_ops.cpp). One trial can accept programs that differ only if
//   (i)  two UF applications whose arguments differ as functions get equal arguments (the UF then
//        returns one value where the model has two independent variables): each pair's
//        arguments differ by a rational function of degree at most 2·A, so by Schwartz–Zippel at
//        most 2A/q per pair, and U applications make at most U²/2 pairs: U²·A/q. Exp atoms of
//        distinct exponents that coincide mod q count the same way: E²·A_e/q;
//   (ii) otherwise every variable is an independent uniform draw from a set of at least q
//        elements (inputs from Z_p, UF outputs by the random-oracle model of the keyed hash, exp
//        atoms by assumption E below), and a differing output element has N_a·D_b − N_b·D_a = 0
//        at the draw: at most max(n_a + d_b, n_b + d_a)/q by Schwartz–Zippel.
// A trial in which a divisor is zero is drawn again; conditioning on a good draw scales the
// bound by 1/(1 − Z/q), Z/q bounding P[some divisor is zero] by Schwartz–Zippel on each divisor.
//   per trial ε = min(1, (D + U²·A + E²·A_e) / q / (1 − Z/q)),   k trials: ε^k,
// with fresh inputs, ω and hash key per trial. ε is computed from the first trial's accounting
// (the same in every trial: it depends on the graphs only), and trials are added until ε^k is at
// most the target.
//
// Like any fingerprint over a fixed prime, a difference whose integer coefficients (after clearing
// the powers of 2 of the dyadic scalars) are all multiples of the modulus would vanish
// identically. Values are compared mod p and q (a multiple of p·q ≈ 2^123 escapes) until they
// pass through an exp, mod p alone after it (≈ 2^62); an exp argument is read mod q alone (≈ 2^61):
// exp(2^61·x) and exp(5283·x) agree in every trial, since 2^61 ≡ 5283 (mod q). Two distinct scalar
// constants congruent mod q are the direct way to get there, and check() refuses to call such
// programs equivalent; products and sums of constants that reach a multiple of q are not caught,
// and the result lists that as an assumption, with its modulus, whenever exp occurs.
//
// Assumption E (for graphs with exp): the atoms ω^e of distinct exponents behave like independent
// uniform elements of the order-q subgroup. Mirage's §5 analysis of LAX programs (linear algebra,
// division, one level of exp) rests on it; Li & Wu (ITCS'26, "Identity Testing for Circuits with
// Exponentiation Gates") prove only a weaker unconditional soundness for this test and derive the
// strong form from a number-theoretic conjecture. Without exp, the bound is unconditional (given
// the random-oracle model of the hash). Integer inputs (embedding ids, rope positions) are one
// random in-range draw per trial, distinct within each input where the range allows, not field
// variables; programs that differ only at particular id or position values are caught only when
// a draw hits them, which the bound does not cover, and the result says so.
#include <algorithm>
#include <bit>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <thread>
#include <unordered_set>

#include <fmt/format.h>

#include "support/error.h"
#include "verify/fingerprint_ops.h"
#include "verify/indexing.h"
#include "verify/verify.h"

namespace yirage::verify {
namespace {

using fp::FTensor;
using fp::Trial;
using ir::Dims;
using ir::TensorType;

// Rope positions have no natural range; 2^24 leaves room for distinct draws.
constexpr int64_t kPositionRange = int64_t(1) << 24;
// A divisor that is zero in this many independent draws is taken to be identically zero.
constexpr int kMaxDegenerateDraws = 8;

// What check_equivalent needs from either kind of program.
struct Program {
  std::vector<TensorType> inputs, outputs;
  std::vector<std::string> input_names, output_names;
  // Per input: integer values are drawn from [0, bound); no entry for float inputs.
  std::vector<std::optional<int64_t>> int_range;
  std::function<std::vector<FTensor>(const std::vector<FTensor>&, Trial&)> run;
};

std::vector<FTensor> run_kernel_graph(const ir::KernelGraph& graph,
                                      const std::vector<FTensor>& inputs, Trial& trial) {
  // Inputs are read where they are: a weight matrix is hundreds of megabytes as fingerprints.
  std::vector<std::vector<FTensor>> values(graph.nodes().size());
  std::vector<const FTensor*> input_of(graph.nodes().size(), nullptr);
  const std::vector<ir::TensorRef> refs = graph.inputs();
  for (size_t i = 0; i < refs.size(); ++i) input_of[size_t(refs[i].node)] = &inputs[i];
  auto value = [&](const ir::TensorRef& ref) {
    const FTensor* input = input_of[size_t(ref.node)];
    return input ? input : &values[size_t(ref.node)][size_t(ref.port)];
  };
  for (size_t id = 0; id < graph.nodes().size(); ++id) {
    const ir::Node& node = graph.nodes()[id];
    if (std::holds_alternative<ir::InputOp>(node.op)) continue;
    std::vector<const FTensor*> in;
    for (const ir::TensorRef& ref : node.inputs) in.push_back(value(ref));
    trial.set_location(fmt::format("{} '{}'", ir::op_name(node.op), node.name));
    values[id] = fp::evaluate_op(node.op, in, node.outputs, trial);
  }
  std::vector<FTensor> outputs;
  for (const ir::GraphOutput& out : graph.outputs())
    outputs.push_back(fp::materialize(*value(out.tensor), trial));
  return outputs;
}

Program program_of(const ir::KernelGraph& graph) {
  Program p;
  const std::vector<ir::TensorRef> refs = graph.inputs();
  for (const ir::TensorRef& ref : refs) {
    p.inputs.push_back(graph.type(ref));
    p.input_names.push_back(graph.node(ref.node).name);
    p.int_range.push_back(graph.type(ref).dtype == ir::DType::i32
                              ? std::optional<int64_t>(std::numeric_limits<int32_t>::max())
                              : std::nullopt);
  }
  // Ids and positions come straight from inputs: no other op produces i32.
  auto narrow = [&](ir::TensorRef ref, int64_t range) {
    const auto it = std::find(refs.begin(), refs.end(), ref);
    if (it == refs.end()) return;
    std::optional<int64_t>& r = p.int_range[size_t(it - refs.begin())];
    r = std::min(*r, range);
  };
  for (const ir::Node& node : graph.nodes()) {
    if (std::holds_alternative<ir::EmbeddingOp>(node.op))
      narrow(node.inputs[1], graph.type(node.inputs[0]).dims[0]);
    if (std::holds_alternative<ir::RopeOp>(node.op)) narrow(node.inputs[1], kPositionRange);
  }
  for (const ir::GraphOutput& out : graph.outputs()) {
    p.outputs.push_back(graph.type(out.tensor));
    p.output_names.push_back(out.name);
  }
  p.run = [&graph](const std::vector<FTensor>& in, Trial& trial) {
    return run_kernel_graph(graph, in, trial);
  };
  return p;
}

Program program_of(const ir::BlockGraph& graph) {
  Program p;
  p.inputs = graph.operands();
  p.outputs = graph.output_types();
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    p.input_names.push_back(fmt::format("operand {}", i));
    p.int_range.push_back(std::nullopt);  // block graphs take float operands only
  }
  for (size_t i = 0; i < p.outputs.size(); ++i)
    p.output_names.push_back(fmt::format("saver {}", i));
  p.run = [&graph](const std::vector<FTensor>& in, Trial& trial) {
    std::vector<const FTensor*> operands;
    for (const FTensor& t : in) operands.push_back(&t);
    std::vector<FTensor> outputs = fp::fingerprint_block_graph(graph, operands, trial);
    for (FTensor& out : outputs) out = fp::materialize(out, trial);
    return outputs;
  };
  return p;
}

void check_signatures(const Program& a, const Program& b) {
  if (a.inputs.size() != b.inputs.size())
    fail("check_equivalent: the first program takes {} inputs, the second {}", a.inputs.size(),
         b.inputs.size());
  for (size_t i = 0; i < a.inputs.size(); ++i)
    if (a.inputs[i] != b.inputs[i])
      fail(
          "check_equivalent: input {} is {} ('{}') in the first program but {} ('{}') in the "
          "second",
          i, ir::format_type(a.inputs[i]), a.input_names[i], ir::format_type(b.inputs[i]),
          b.input_names[i]);
  if (a.outputs.size() != b.outputs.size())
    fail("check_equivalent: the first program has {} outputs, the second {}", a.outputs.size(),
         b.outputs.size());
  for (size_t i = 0; i < a.outputs.size(); ++i)
    if (a.outputs[i] != b.outputs[i])
      fail(
          "check_equivalent: output {} is {} ('{}') in the first program but {} ('{}') in the "
          "second",
          i, ir::format_type(a.outputs[i]), a.output_names[i], ir::format_type(b.outputs[i]),
          b.output_names[i]);
}

void check_options(const FingerprintOptions& o) {
  if (!(o.target_bound > 0 && o.target_bound <= 1))
    fail("check_equivalent: target_bound {} must be in (0, 1]", o.target_bound);
  if (o.min_trials < 1 || o.max_trials < o.min_trials)
    fail("check_equivalent: need 1 <= min_trials ({}) <= max_trials ({})", o.min_trials,
         o.max_trials);
}

// `count` integers from [0, range), distinct when the range allows it.
std::vector<int64_t> draw_integers(int64_t count, int64_t range, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> any(0, range - 1);
  std::vector<int64_t> values;
  if (count > range) {
    for (int64_t i = 0; i < count; ++i) values.push_back(any(rng));
  } else if (count * 2 <= range) {
    std::unordered_set<int64_t> seen;
    while (int64_t(values.size()) < count)
      if (int64_t v = any(rng); seen.insert(v).second) values.push_back(v);
  } else {  // a partial Fisher–Yates shuffle of the whole range, which is at most 2·count
    std::vector<int64_t> all(static_cast<size_t>(range));
    std::iota(all.begin(), all.end(), int64_t(0));
    for (int64_t i = 0; i < count; ++i) {
      std::swap(all[size_t(i)],
                all[size_t(std::uniform_int_distribution<int64_t>(i, range - 1)(rng))]);
      values.push_back(all[size_t(i)]);
    }
  }
  return values;
}

// xoshiro256** (Blackman & Vigna), seeded from the trial's generator, for the bulk of a trial's
// draws: a weight matrix is millions of field elements, and mt19937_64 behind
// uniform_int_distribution took a tenth of a proof's time.
class BulkRng {
 public:
  explicit BulkRng(std::mt19937_64& seed) {
    for (uint64_t& word : s_) word = seed();
  }
  uint64_t next() {
    const uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = std::rotl(s_[3], 45);
    return result;
  }
  // Uniform on [0, m) for m in (2^(bits-1), 2^bits]: `bits` random bits, redrawn while >= m
  // (for p and q, with probability below 2^-47).
  uint64_t below(uint64_t m, int bits) {
    for (;;)
      if (const uint64_t x = next() >> (64 - bits); x < m) return x;
  }

 private:
  uint64_t s_[4];
};

// Below this many input elements a trial runs on one thread: starting one costs more.
constexpr int64_t kParallelInputElements = int64_t(1) << 15;

bool run_in_parallel(const Program& a, const FingerprintOptions& options) {
  const int threads =
      options.threads > 0 ? options.threads : int(std::thread::hardware_concurrency());
  int64_t elements = 0;
  for (const TensorType& t : a.inputs) elements += ir::num_elements(t.dims);
  return threads > 1 && elements >= kParallelInputElements;
}

// Draws into `t`, which has `type` already when a previous trial left it there: refilling it
// spares the page faults of a fresh allocation the size of a weight matrix. Field elements come
// in chunks, each from a generator seeded in turn from the trial's, so that two threads can draw
// them and the draw is the same on one.
void draw_input(const TensorType& type, std::optional<int64_t> int_range, Trial& trial,
                bool parallel, FTensor& t) {
  if (t.type != type || t.v.size() != size_t(ir::num_elements(type.dims))) t = FTensor(type);
  t.has_q = true;
  t.max_set = false;
  t.degree = {};
  t.uniform = ~0u;
  if (int_range) {
    const std::vector<int64_t> ints = draw_integers(t.size(), *int_range, trial.rng());
    for (size_t i = 0; i < ints.size(); ++i) t.v[i] = field::pair_of_int(ints[i]);
    t.degree = {0, 0};  // a draw, not a variable: see the header comment
    return;
  }
  constexpr size_t kChunk = size_t(1) << 16;
  std::vector<BulkRng> chunks;
  for (size_t first = 0; first < t.v.size(); first += kChunk) chunks.emplace_back(trial.rng());
  auto fill = [&](size_t from, size_t step) {
    for (size_t c = from; c < chunks.size(); c += step) {
      BulkRng& rng = chunks[c];
      for (size_t i = c * kChunk; i < std::min(t.v.size(), (c + 1) * kChunk); ++i)
        t.v[i] = {rng.below(field::kP, 62), rng.below(field::kQ, 61)};
    }
  };
  if (!parallel || chunks.size() < 2) return fill(0, 1);
  std::thread helper(fill, 1, 2);
  fill(0, 2);
  helper.join();
}

// Where a trial tells the programs apart, if it does.
std::optional<FingerprintMismatch> compare(const Program& a, const std::vector<FTensor>& out_a,
                                           const std::vector<FTensor>& out_b, int trial) {
  for (size_t o = 0; o < out_a.size(); ++o) {
    const FTensor &x = out_a[o], &y = out_b[o];
    const bool both_q = x.has_q && y.has_q;  // else only p holds the value
    for (size_t i = 0; i < x.v.size(); ++i)
      if (x.v[i].p != y.v[i].p || (both_q && x.v[i].q != y.v[i].q))
        return FingerprintMismatch{o, a.output_names[o], unravel(int64_t(i), x.type.dims), trial};
  }
  return std::nullopt;
}

double per_trial_bound(const fp::Accounting& acc, const std::vector<FTensor>& out_a,
                       const std::vector<FTensor>& out_b) {
  double output_degree = 0;
  for (size_t o = 0; o < out_a.size(); ++o) {
    const fp::Degree a = out_a[o].degree, b = out_b[o].degree;
    output_degree = std::max(output_degree, std::max(a.num + b.den, b.num + a.den));
  }
  const double q = double(field::kQ);
  const double degenerate = acc.zero_divisor_risk / q;
  if (degenerate >= 1) return 1;
  const double collisions = acc.uf_calls * acc.uf_calls * acc.uf_arg_degree +
                            acc.exp_calls * acc.exp_calls * acc.exp_arg_degree;
  return std::min(1.0, (output_degree + collisions) / q / (1 - degenerate));
}

// Both programs on one draw, on two threads when `parallel`: the accounting merges as if they
// had run in turn, and a failure is the one the sequential run would raise (a's first).
std::pair<std::vector<FTensor>, std::vector<FTensor>> run_both(const Program& a, const Program& b,
                                                               const std::vector<FTensor>& inputs,
                                                               Trial& trial, bool parallel) {
  if (!parallel) {
    std::vector<FTensor> out_a = a.run(inputs, trial);
    return {std::move(out_a), b.run(inputs, trial)};
  }
  Trial trial_b = trial;  // the same ω and hash key; inputs are drawn already
  trial_b.accounting() = {};
  std::vector<FTensor> out_a, out_b;
  std::exception_ptr error_a, error_b;
  std::thread worker([&] {
    try {
      out_b = b.run(inputs, trial_b);
    } catch (...) {
      error_b = std::current_exception();
    }
  });
  try {
    out_a = a.run(inputs, trial);
  } catch (...) {
    error_a = std::current_exception();
  }
  worker.join();
  if (error_a) std::rethrow_exception(error_a);
  if (error_b) std::rethrow_exception(error_b);
  trial.accounting().merge(trial_b.accounting());
  return {std::move(out_a), std::move(out_b)};
}

struct TrialOutcome {
  std::optional<FingerprintMismatch> mismatch;
  double per_trial_bound = 1;
  bool uses_exp = false;
  std::optional<std::string> congruent_constants;
};

// Two distinct scalar constants that the fingerprints cannot tell apart: equal mod q, which is all
// an exp reads of its argument, or equal mod both p and q anywhere.
std::optional<std::string> congruent_constants(const fp::Accounting& acc) {
  std::vector<double> values = acc.constants;
  std::sort(values.begin(), values.end());
  for (size_t i = 0; i < values.size(); ++i)
    for (size_t j = i + 1; j < values.size(); ++j) {
      const auto qi = field::residue_of(values[i], field::kQ);
      const auto qj = field::residue_of(values[j], field::kQ);
      if (qi != qj) continue;
      const bool same_p =
          field::residue_of(values[i], field::kP) == field::residue_of(values[j], field::kP);
      if (!acc.uses_exp && !same_p) continue;
      return fmt::format(
          "the scalars {} and {} differ but are congruent modulo {}; the fingerprints cannot tell "
          "programs built from them apart",
          values[i], values[j],
          same_p ? fmt::format("both p = {} and q = {}", field::kP, field::kQ)
                 : fmt::format("q = {}, which is all an exp reads of its argument", field::kQ));
    }
  return std::nullopt;
}

TrialOutcome run_trial(const Program& a, const Program& b,
                       const std::vector<std::optional<int64_t>>& int_range,
                       const FingerprintOptions& options, int index, std::vector<FTensor>& inputs) {
  std::string degenerate_at;
  for (int attempt = 0; attempt < kMaxDegenerateDraws; ++attempt) {
    std::vector<uint32_t> words;
    if (options.seed) {
      words = {uint32_t(*options.seed), uint32_t(*options.seed >> 32)};
    } else {
      std::random_device device;
      for (int i = 0; i < 8; ++i) words.push_back(device());
    }
    words.push_back(uint32_t(index));
    words.push_back(uint32_t(attempt));
    std::seed_seq seed(words.begin(), words.end());
    Trial trial(seed);
    try {
      const bool parallel = run_in_parallel(a, options);
      inputs.resize(a.inputs.size());
      for (size_t i = 0; i < a.inputs.size(); ++i)
        draw_input(a.inputs[i], int_range[i], trial, parallel, inputs[i]);
      const auto [out_a, out_b] = run_both(a, b, inputs, trial, parallel);
      return {compare(a, out_a, out_b, index), per_trial_bound(trial.accounting(), out_a, out_b),
              trial.accounting().uses_exp, congruent_constants(trial.accounting())};
    } catch (const fp::DegenerateTrial& d) {
      degenerate_at = d.what;
    }
  }
  fail(
      "check_equivalent: {} in {} independent draws; the program divides by something that is "
      "identically zero",
      degenerate_at, kMaxDegenerateDraws);
}

std::vector<std::string> assumptions_of(const Program& a, bool uses_exp,
                                        const std::vector<std::optional<int64_t>>& int_range) {
  std::vector<std::string> notes;
  if (uses_exp) {
    notes.push_back(
        "exp: atoms ω^e of distinct exponents act as independent uniform elements of the order-q "
        "subgroup (Mirage §5; a conjecture per Li & Wu, ITCS'26)");
    notes.push_back(fmt::format(
        "exp arguments are compared modulo q = {}: two that differ by a multiple of q (as "
        "exp(2^61·x) and exp(5283·x) do) count as equal; distinct scalar constants were checked "
        "to differ mod q, products and sums of them were not",
        field::kQ));
  }
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    if (!int_range[i]) continue;
    const int64_t count = ir::num_elements(a.inputs[i].dims);
    notes.push_back(fmt::format(
        "integer input '{}': one draw of {} ids per trial from [0, {}){}; differences at "
        "particular values are not covered",
        a.input_names[i], count, *int_range[i],
        count > *int_range[i] ? ", with repeats (more ids than values)" : ", all distinct"));
  }
  notes.push_back(fmt::format(
      "the two programs' difference, as integer coefficients after clearing powers of 2, is not "
      "all multiples of p·q (values before any exp) or of p = {} (values after one)",
      field::kP));
  return notes;
}

int trials_needed(double per_trial, const FingerprintOptions& o) {
  if (per_trial <= 0) return o.min_trials;
  if (per_trial >= 1) return o.min_trials;  // no number of trials helps; bound_met says so
  const double k = std::ceil(std::log(o.target_bound) / std::log(per_trial));
  return std::clamp(int(std::min(k, double(o.max_trials))), o.min_trials, o.max_trials);
}

EquivalenceResult check(const Program& a, const Program& b, const FingerprintOptions& options) {
  check_options(options);
  check_signatures(a, b);
  std::vector<std::optional<int64_t>> int_range = a.int_range;
  for (size_t i = 0; i < int_range.size(); ++i)
    if (int_range[i] && b.int_range[i]) int_range[i] = std::min(*int_range[i], *b.int_range[i]);

  EquivalenceResult result;
  int needed = options.min_trials;
  std::vector<FTensor> inputs;  // redrawn in place by every trial
  for (int t = 0; t < needed; ++t) {
    const TrialOutcome outcome = run_trial(a, b, int_range, options, t, inputs);
    result.trials = t + 1;
    if (t == 0) {
      result.per_trial_bound = outcome.per_trial_bound;
      result.assumptions = assumptions_of(a, outcome.uses_exp, int_range);
      needed = trials_needed(outcome.per_trial_bound, options);
    }
    if (outcome.mismatch) {
      result.mismatch = outcome.mismatch;
      return result;
    }
    if (outcome.congruent_constants) {  // the same constants in every trial: no trial can help
      result.not_proven = outcome.congruent_constants;
      return result;
    }
  }
  result.equivalent = true;
  result.false_accept_bound = std::pow(result.per_trial_bound, result.trials);
  result.bound_met = result.false_accept_bound <= options.target_bound;
  return result;
}

}  // namespace

namespace fp {

std::vector<FTensor> evaluate_op(const ir::Op& op, const std::vector<const FTensor*>& in,
                                 const std::vector<TensorType>& out, Trial& trial) {
  using Result = std::vector<FTensor>;
  return std::visit(
      ir::Overloaded{
          [&](const ir::InputOp&) -> Result {
            fail("fingerprint: {}: an input node has no bound value", trial.location());
          },
          [&](const ir::MatmulOp&) -> Result { return {matmul(*in[0], *in[1], out[0], trial)}; },
          [&](const ir::UnaryOp& o) -> Result { return {unary(o, *in[0], trial)}; },
          [&](const ir::BinaryOp& o) -> Result {
            return {binary(o.fn, *in[0], *in[1], out[0], trial)};
          },
          [&](const ir::ReduceOp& o) -> Result { return {reduce(o, *in[0], out[0], trial)}; },
          [&](const ir::RmsNormOp& o) -> Result { return {rms_norm(o, in, trial)}; },
          [&](const ir::LayerNormOp& o) -> Result { return {layer_norm(o, in, trial)}; },
          [&](const ir::SoftmaxOp& o) -> Result { return {softmax(o.dim, *in[0], trial)}; },
          [&](const ir::ConcatOp& o) -> Result { return {concat(o.dim, in, out[0], trial)}; },
          [&](const ir::SplitOp& o) -> Result { return split(o.dim, *in[0], out); },
          [&](const ir::ReshapeOp&) -> Result { return {reshape(*in[0], out[0])}; },
          [&](const ir::PermuteOp& o) -> Result { return {permute(o.perm, *in[0], out[0])}; },
          [&](const ir::EmbeddingOp&) -> Result { return {embedding(*in[0], *in[1], out[0])}; },
          [&](const ir::RopeOp& o) -> Result { return {rope(o, *in[0], *in[1], trial)}; },
          [&](const ir::QuantMatmulOp&) -> Result {
            return {quant_matmul(*in[0], *in[1], out[0], trial)};
          },
          [&](const ir::PagedAttentionOp&) -> Result { return paged_attention(in, out, trial); },
          [&](const ir::FusedOp& o) -> Result {
            return fingerprint_block_graph(*o.body, in, trial);
          },
      },
      op);
}

}  // namespace fp

std::string EquivalenceResult::summary() const {
  if (!equivalent) {
    if (not_proven) return "not proven equivalent: " + *not_proven;
    if (!mismatch) return fmt::format("not equivalent after {} trials", trials);
    return fmt::format("not equivalent: output {} ('{}') differs at {} in trial {}",
                       mismatch->output, mismatch->name, ir::format_dims(mismatch->coords),
                       mismatch->trial);
  }
  std::string line =
      fmt::format("equivalent after {} trial{}; P[false accept] <= {:.3g} (per trial {:.3g}){}",
                  trials, trials == 1 ? "" : "s", false_accept_bound, per_trial_bound,
                  bound_met ? "" : "; the target bound is NOT met");
  for (const std::string& a : assumptions) line += "; assumes " + a;
  return line;
}

EquivalenceResult check_equivalent(const ir::KernelGraph& a, const ir::KernelGraph& b,
                                   const FingerprintOptions& options) {
  return check(program_of(a), program_of(b), options);
}

EquivalenceResult check_equivalent(const ir::KernelGraph& a, const ir::BlockGraph& b,
                                   const FingerprintOptions& options) {
  return check(program_of(a), program_of(b), options);
}

}  // namespace yirage::verify
