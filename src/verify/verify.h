// YiRage verification: deciding that a candidate computes what the original program computes.
//
// This stage holds the reference executor, the oracle for every test and every float check:
// plain, obviously correct C++ for every op and dtype. It evaluates a kernel graph op by op on
// the host, widening f16/bf16 operands to float, accumulating matmuls, reductions and norms in
// double, and rounding each result once to its tensor's dtype, the way a tensor of that dtype
// would hold it. Speed is not a goal here; clarity is.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/block_graph.h"
#include "ir/ir.h"

namespace yirage::verify {

// Evaluates `graph` on `inputs` (one per graph input, in KernelGraph::inputs() order, each of
// exactly the input's type) and returns the marked outputs in order. Throws yirage::Error on a
// wrong number, dtype or shape of inputs, naming the input, and on an embedding id or rope
// position out of range, naming the op and the index.
std::vector<ir::HostTensor> run_reference(const ir::KernelGraph& graph,
                                          const std::vector<ir::HostTensor>& inputs);

// Checks that `inputs` match the graph's inputs; throws yirage::Error naming the first mismatch.
void check_inputs(const ir::KernelGraph& graph, const std::vector<ir::HostTensor>& inputs);

// Runs a fused kernel's block graph literally (block_executor.cpp): every block of the grid, every
// loop iteration, every block op on f32 tiles, and the savers, which round once to the output
// dtype. `operands` must match graph.operands(). Returns one tensor per saver, in saver order.
// Throws yirage::Error on mismatched operands and when an output element is not written exactly
// once, which is how a wrong omap shows.
std::vector<ir::HostTensor> run_block_graph(const ir::BlockGraph& graph,
                                            const std::vector<ir::HostTensor>& operands);
// The same on operands held elsewhere, which are read where they are.
std::vector<ir::HostTensor> run_block_graph(const ir::BlockGraph& graph,
                                            const std::vector<const ir::HostTensor*>& operands);

// ==== Probabilistic equivalence by fingerprints (fingerprint.cpp, block_fingerprint.cpp) ========
//
// After Mirage (Wu et al., OSDI'25, §5): both programs run on the same random inputs with exact
// arithmetic over the prime fields Z_p × Z_q (q | p - 1), where exp(x) = ω^(x mod q) for a random
// ω of order q, and ops outside that fragment are uninterpreted functions, keyed hashes drawn
// afresh each trial. Programs that compute the same real function agree in every trial, up to the
// documented incompleteness (e.g. sqrt(x)² = x is not recognised); programs that differ agree in
// one trial with probability at most `per_trial_bound` (Schwartz–Zippel, from degrees computed
// along the graphs), and in k independent trials with at most its k-th power. fingerprint_ops.cpp
// documents what each op becomes; fingerprint.cpp derives the bound.

struct FingerprintOptions {
  double target_bound = 1e-9;  // trials are added until the false-accept bound is at most this
  // At least two: the exp part of the bound is conditional (see `assumptions`), and a second ω
  // is cheap insurance.
  int min_trials = 2;
  int max_trials = 64;
  std::optional<uint64_t> seed;  // fixed randomness for reproducible tests; else random_device
  // Threads for one trial (the two programs run at once): 0 = two where the hardware has them.
  // The result does not depend on it.
  int threads = 0;
};

struct FingerprintMismatch {
  size_t output = 0;  // which output differs
  std::string name;   // its name in the first program
  ir::Dims coords;    // the first element that differs
  int trial = 0;      // in which trial (from 0)
};

struct EquivalenceResult {
  bool equivalent = false;  // every trial agreed on every output element
  int trials = 0;
  double per_trial_bound = 1.0;     // P[one trial accepts two programs that differ] <= this
  double false_accept_bound = 1.0;  // per_trial_bound^trials: what `equivalent` may be wrong by
  bool bound_met = false;           // equivalent, with false_accept_bound <= the target
  // What the bound rests on beyond Schwartz–Zippel and the random-oracle model of the hash.
  std::vector<std::string> assumptions;
  std::optional<FingerprintMismatch> mismatch;  // set when a trial told the programs apart
  // Set when no trial told them apart but the fingerprints cannot: why (two distinct scalar
  // constants congruent mod q). `equivalent` is false then.
  std::optional<std::string> not_proven;
  // Set by check_equivalent_by_parts when it proved the fused kernels one by one: how many.
  int parts = 0;

  // One line: "equivalent after 2 trials; P[false accept] <= 1.2e-34 ..." or the mismatch.
  std::string summary() const;
};

// Decides whether `a` and `b` compute the same function. Both take the same inputs (dtypes and
// shapes, in input order) and produce outputs of the same types; otherwise throws yirage::Error
// naming the first difference. Also throws when a divisor is zero in every draw (the program
// divides by something identically zero).
EquivalenceResult check_equivalent(const ir::KernelGraph& a, const ir::KernelGraph& b,
                                   const FingerprintOptions& options = {});

// The same for a fused kernel against a kernel graph: the block graph's operands are the kernel
// graph's inputs in order, its savers' outputs the kernel graph's outputs. Also throws when the
// block graph is invalid or its savers do not write every output element exactly once.
EquivalenceResult check_equivalent(const ir::KernelGraph& a, const ir::BlockGraph& b,
                                   const FingerprintOptions& options = {});

// The same for a µGraph `b` made from `a` by replacing groups of its ops with fused kernels (what
// the search builds): when every other node of `b` is one of `a`'s, op for op, each fused kernel
// is proved against the region of `a` between its operands and its results, at that region's
// shapes, and the bounds add up (by_parts.cpp says why that suffices). Otherwise, and for every
// other pair of programs, it is check_equivalent(a, b). `parts` says which ran.
EquivalenceResult check_equivalent_by_parts(const ir::KernelGraph& a, const ir::KernelGraph& b,
                                            const FingerprintOptions& options = {});

}  // namespace yirage::verify
