// Fingerprint tensors and the ops on them: internal to verify/ (fingerprint.cpp and
// block_fingerprint.cpp evaluate graphs with these). The modelling choices are documented at the
// top of fingerprint_ops.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ir/block_graph.h"
#include "ir/ir.h"
#include "verify/field.h"

namespace yirage::verify::fp {

using field::Pair;

// A bound on the degrees of the numerator and denominator of the rational function every element
// of a tensor computes, in the inputs and the outputs of uninterpreted functions (UFs) and exps,
// each counted as a variable of degree 1.
struct Degree {
  double num = 1, den = 0;
};

struct FTensor {
  ir::TensorType type;
  std::vector<Pair> v;  // row-major, one per element
  // q holds the value mod q. False once the value depends on an exp, whose q-residue does not
  // exist; such tensors are compared on p alone and exp of them falls back to a UF.
  bool has_q = true;
  // The elements are max-set fingerprints Σ h(x) over the multiset the max ranges over, not
  // values (see max in fingerprint_ops.cpp). Shape ops move them, a max adds them up, and every
  // other op materializes them first.
  bool max_set = false;
  Degree degree;
  // Bit j: every element's denominator is the same polynomial along dim j, so summing along j
  // keeps the denominator's degree.
  uint32_t uniform = ~0u;

  FTensor() = default;
  explicit FTensor(ir::TensorType t);
  int64_t size() const { return int64_t(v.size()); }
  int rank() const { return int(type.dims.size()); }
};

// Thrown when a divisor is zero in a trial: the trial says nothing and is drawn again.
struct DegenerateTrial {
  std::string what;
};

// Counts that enter the false-accept bound (see per_trial_bound in fingerprint.cpp).
struct Accounting {
  double uf_calls = 0, uf_arg_degree = 0;    // UF applications and their arguments' degrees
  double exp_calls = 0, exp_arg_degree = 0;  // exp atoms ω^e and their exponents' degrees
  double zero_divisor_risk = 0;              // Σ over divisions: elements · divisor degree
  bool uses_exp = false;
  // The real value of every scalar constant (eps, mul_scalar's factor), each once: exp reads its
  // argument mod q only, so two distinct constants congruent mod q (2^61 and 5283) would make
  // exp(2^61·x) and exp(5283·x) agree in every trial. fingerprint.cpp refuses such programs.
  std::vector<double> constants;

  void note_constant(double value) {
    if (std::find(constants.begin(), constants.end(), value) == constants.end())
      constants.push_back(value);
  }

  // Adds the counts of another program evaluated in the same trial.
  void merge(const Accounting& o) {
    uf_calls += o.uf_calls;
    uf_arg_degree = std::max(uf_arg_degree, o.uf_arg_degree);
    exp_calls += o.exp_calls;
    exp_arg_degree = std::max(exp_arg_degree, o.exp_arg_degree);
    zero_divisor_risk += o.zero_divisor_risk;
    uses_exp = uses_exp || o.uses_exp;
    for (double c : o.constants) note_constant(c);
  }
};

// Identifies an uninterpreted function; part of the hash key, so distinct functions never share
// outputs.
enum class Uf : uint64_t {
  sqrt = 1,
  gelu,
  relu,
  pow,
  max_element,       // h in a max-set fingerprint Σ h(x)
  max_value,         // the value of a max, from its max-set fingerprint
  nested_exp,        // exp of a value that has no q-residue
  rope_angle,        // cos and sin of one rope angle
  quant_activation,  // an activation as a quant_matmul quantizes it
  quant_weight,      // a quant_matmul's dequantized weight element
  paged_attention,   // an element of a paged_attention's outputs
};

// One trial's randomness: ω, the UF key, and the generator for inputs; and its accounting.
class Trial {
 public:
  explicit Trial(std::seed_seq& seed);

  std::mt19937_64& rng() { return rng_; }
  const field::PowerTable& powers() const { return powers_; }
  // A uniformly random pair that depends only on (fn, args).
  Pair uf(Uf fn, std::initializer_list<uint64_t> args) const;
  Accounting& accounting() { return accounting_; }
  // Names the op being evaluated, for the message of a degenerate trial.
  void set_location(std::string where) { location_ = std::move(where); }
  const std::string& location() const { return location_; }

 private:
  std::mt19937_64 rng_;
  field::HashKey key_;
  field::PowerTable powers_;
  Accounting accounting_;
  std::string location_;
};

// A constant (eps, 1) as a rank-0 tensor, which broadcasts to any shape.
FTensor constant(double value, ir::DType dtype, Trial& trial);

// Turns max-set fingerprints into values; other tensors are returned unchanged.
FTensor materialize(const FTensor& x, Trial& trial);

FTensor unary(const ir::UnaryOp& op, const FTensor& x, Trial& trial);
FTensor binary(ir::BinaryFn fn, const FTensor& a, const FTensor& b, const ir::TensorType& out,
               Trial& trial);
FTensor reduce(const ir::ReduceOp& op, const FTensor& x, const ir::TensorType& out, Trial& trial);
FTensor matmul(const FTensor& a, const FTensor& b, const ir::TensorType& out, Trial& trial);
FTensor exp(const FTensor& x, Trial& trial);
FTensor softmax(int dim, const FTensor& x, Trial& trial);
FTensor rms_norm(const ir::RmsNormOp& op, const std::vector<const FTensor*>& in, Trial& trial);
FTensor layer_norm(const ir::LayerNormOp& op, const std::vector<const FTensor*>& in, Trial& trial);
FTensor concat(int dim, const std::vector<const FTensor*>& in, const ir::TensorType& out,
               Trial& trial);
std::vector<FTensor> split(int dim, const FTensor& x, const std::vector<ir::TensorType>& out);
FTensor reshape(const FTensor& x, const ir::TensorType& out);
FTensor permute(const std::vector<int>& perm, const FTensor& x, const ir::TensorType& out);
FTensor embedding(const FTensor& table, const FTensor& ids, const ir::TensorType& out);
FTensor rope(const ir::RopeOp& op, const FTensor& x, const FTensor& positions, Trial& trial);
FTensor quant_matmul(const FTensor& x, const FTensor& w, const ir::TensorType& out, Trial& trial);
std::vector<FTensor> paged_attention(const std::vector<const FTensor*>& in,
                                     const std::vector<ir::TensorType>& out, Trial& trial);

// Max-set fingerprints of x's elements: their own if x is a max set, h(x) otherwise. Adding them
// up gives the fingerprint of the max over all of them.
FTensor max_elements(const FTensor& x, Trial& trial);
FTensor uf_sqrt(const FTensor& x, Trial& trial);

// Any kernel-level op, and so any shared block op (fingerprint.cpp).
std::vector<FTensor> evaluate_op(const ir::Op& op, const std::vector<const FTensor*>& in,
                                 const std::vector<ir::TensorType>& out, Trial& trial);

// A fused kernel's block graph on its operands: every block, every iteration, then the savers
// (block_fingerprint.cpp). Returns one tensor per saver. Throws yirage::Error when the graph is
// invalid or its savers do not write every output element exactly once.
std::vector<FTensor> fingerprint_block_graph(const ir::BlockGraph& graph,
                                             const std::vector<const FTensor*>& operands,
                                             Trial& trial);

// x / n, exactly.
FTensor divided_by_count(const FTensor& x, int64_t n);

// Degree rules shared with the block evaluator.
Degree sum_degree(Degree term, double count, bool uniform);
uint32_t trivial_bits(const ir::Dims& dims);  // the dims of extent 1

}  // namespace yirage::verify::fp
