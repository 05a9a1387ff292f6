// Graphs shared by the serialization and hash tests.
#pragma once

#include <set>
#include <string_view>

#include "ir/ir.h"

namespace yirage::ir::testing {

// Every op name of ops.h, so a test can check that a graph covers them all.
inline const std::set<std::string_view>& all_op_names() {
  static const std::set<std::string_view> names{
      "input", "matmul",  "exp",      "silu",       "gelu",       "relu",
      "sqrt",  "rsqrt",   "square",   "neg",        "reciprocal", "mul_scalar",
      "add",   "sub",     "mul",      "div",        "pow",        "sum",
      "mean",  "max",     "rms_norm", "layer_norm", "softmax",    "concat",
      "split", "reshape", "permute",  "embedding",  "rope",       "quant_matmul"};
  return names;
}

// A small transformer-ish graph that uses every op, every attribute with a non-default value
// somewhere, all three float dtypes, a non-zero split port and doubles that have no short
// decimal form.
inline KernelGraph every_op_graph() {
  KernelGraph g;
  auto table = g.input("table", {32, 16}, DType::f32);
  auto ids = g.input("ids", {2, 8}, DType::i32);
  auto w = g.input("w", {16, 16}, DType::f32);
  auto gamma = g.input("gamma", {16}, DType::f32);
  auto beta = g.input("beta", {16}, DType::f32);
  auto pos = g.input("pos", {8}, DType::i32);
  auto h16 = g.input("h16", {4, 8}, DType::f16);
  auto hb = g.input("hb", {4, 8}, DType::bf16);
  auto qx = g.input("qx", {3, 64}, DType::f32);
  auto qw = g.input("qw", {5, 2 * 34}, DType::u8);  // 5 rows of 2 q8_0 blocks

  auto emb = g.embedding(table, ids);                          // [2, 8, 16]
  auto mm = g.matmul(emb, w);                                  // [2, 8, 16]
  auto normed = g.rms_norm(mm, {16}, gamma, 1e-6);             // weight
  auto plain_norm = g.rms_norm(normed, {8, 16}, {}, 1.0 / 3);  // no weight, two dims
  auto ln_full = g.layer_norm(plain_norm, {16}, gamma, beta, 1e-5);
  auto ln_bias = g.layer_norm(ln_full, {16}, {}, beta, 2e-7);
  auto ln_none = g.layer_norm(ln_bias, {16});

  auto e = g.exp(ln_none);
  auto s = g.silu(e);
  auto ge = g.gelu(s);
  auto r = g.relu(ge);
  auto sq = g.sqrt(r);
  auto rs = g.rsqrt(sq);
  auto sqr = g.square(rs);
  auto ng = g.neg(sqr);
  auto rc = g.reciprocal(ng);
  auto ms = g.mul_scalar(rc, 0.1);

  auto sum = g.add(ms, mm);
  auto diff = g.sub(sum, normed);
  auto prod = g.mul(diff, diff);
  auto quot = g.div(prod, sum);
  auto pw = g.pow(quot, gamma);

  auto heads = g.reshape(pw, {2, 8, -1, 4});  // [2, 8, 4, 4]
  auto rot = g.rope(heads, pos, 500000.0, RopeStyle::neox);
  auto rot2 = g.rope(rot, pos);
  auto perm = g.permute(rot2, {0, 2, 1, 3});                  // [2, 4, 8, 4]
  auto parts = g.split(perm, -2, {3, 5});                     // [2, 4, 3, 4], [2, 4, 5, 4]
  auto joined = g.concat({parts[1], parts[0], parts[1]}, 2);  // [2, 4, 13, 4]
  auto sm = g.softmax(joined, -1);
  auto total = g.reduce(ReduceFn::sum, sm, -1, false);  // [2, 4, 13]
  auto avg = g.reduce(ReduceFn::mean, total, 0);        // [1, 4, 13]
  auto peak = g.reduce(ReduceFn::max, avg, 1, true);    // [1, 1, 13]

  auto half = g.softmax(h16, 0);
  auto brain = g.relu(hb);
  auto quant = g.quant_matmul(qx, qw, QuantFormat::q8_0);

  g.mark_output(peak, "peak \"max\" \u00e9");
  g.mark_output(parts[1]);
  g.mark_output(half, "half");
  g.mark_output(brain);
  g.mark_output(quant);
  return g;
}

}  // namespace yirage::ir::testing
