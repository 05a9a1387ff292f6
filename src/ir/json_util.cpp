// The JSON helpers shared by the kernel-graph and block-graph readers and writers: typed value
// readers whose errors name the JSON path, and the attribute fields of the kernel-level ops,
// which block graphs reuse for the ops they share. See json.cpp for the format's conventions.
#include "ir/json_util.h"

#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/error.h"

namespace yirage::ir::json_util {
namespace {

std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::string: return fmt::format("the string {}", v.dump());
    case json::value_t::number_float:
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return fmt::format("the number {}", v.dump());
    case json::value_t::boolean: return fmt::format("the boolean {}", v.dump());
    case json::value_t::null: return "null";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return v.type_name();
  }
}

RopeStyle get_rope_style(const json& v, const std::string& path) {
  std::string name = get_string(v, path);
  for (RopeStyle style : {RopeStyle::interleaved, RopeStyle::neox})
    if (rope_style_name(style) == name) return style;
  fail("{}: unknown rope style \"{}\"; valid styles: interleaved, neox", path, name);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Writing

void write_type(ordered_json& j, const TensorType& type) {
  j["dtype"] = dtype_name(type.dtype);
  j["shape"] = type.dims;
}

void write_attributes(ordered_json& j, const Op& op) {
  std::visit(Overloaded{
                 [&](const UnaryOp& u) {
                   if (u.fn == UnaryFn::mul_scalar) j["scalar"] = u.scalar;
                 },
                 [&](const ReduceOp& r) {
                   j["dim"] = r.dim;
                   j["keepdim"] = r.keepdim;
                 },
                 [&](const RmsNormOp& n) {
                   j["normalized_shape"] = n.normalized_shape;
                   j["eps"] = n.eps;
                   j["has_weight"] = n.has_weight;
                 },
                 [&](const LayerNormOp& n) {
                   j["normalized_shape"] = n.normalized_shape;
                   j["eps"] = n.eps;
                   j["has_weight"] = n.has_weight;
                   j["has_bias"] = n.has_bias;
                 },
                 [&](const SoftmaxOp& s) { j["dim"] = s.dim; },
                 [&](const ConcatOp& c) { j["dim"] = c.dim; },
                 [&](const SplitOp& s) {
                   j["dim"] = s.dim;
                   j["sizes"] = s.sizes;
                 },
                 [&](const ReshapeOp& r) { j["shape"] = r.shape; },
                 [&](const PermuteOp& p) { j["perm"] = p.perm; },
                 [&](const RopeOp& r) {
                   j["theta"] = r.theta;
                   j["style"] = rope_style_name(r.style);
                 },
                 [&](const QuantMatmulOp& q) {
                   j["format"] = quant_format_name(q.format);
                   if (!q.prefetch) j["prefetch"] = false;
                 },
                 [&](const PagedAttentionOp& a) { j["block_tokens"] = a.block_tokens; },
                 [](const InputOp&) {},
                 [&](const MatmulOp& m) {
                   if (m.library) j["library"] = true;  // omitted when false: older files unchanged
                 },
                 [](const BinaryOp&) {},
                 [](const EmbeddingOp&) {},
                 [&](const FusedOp& f) { j["body"] = block_graph_json(*f.body); },
             },
             op);
}

// ---------------------------------------------------------------------------------------------
// Reading values

[[noreturn]] void wrong_type(const json& v, const std::string& path, std::string_view expected) {
  fail("{}: expected {}, got {}", path, expected, describe(v));
}

std::string item_path(const std::string& path, size_t index) {
  return fmt::format("{}[{}]", path, index);
}

std::string get_string(const json& v, const std::string& path) {
  if (!v.is_string()) wrong_type(v, path, "a string");
  return v.get<std::string>();
}

bool get_bool(const json& v, const std::string& path) {
  if (!v.is_boolean()) wrong_type(v, path, "a boolean (true or false)");
  return v.get<bool>();
}

double get_number(const json& v, const std::string& path) {
  if (!v.is_number()) wrong_type(v, path, "a number");
  return v.get<double>();
}

int64_t get_int64(const json& v, const std::string& path) {
  if (!v.is_number_integer()) wrong_type(v, path, "an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    fail("{}: {} is out of range", path, v.dump());
  return v.get<int64_t>();
}

int get_int(const json& v, const std::string& path) {
  int64_t x = get_int64(v, path);
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
    fail("{}: {} is out of range", path, x);
  return int(x);
}

const json& get_array(const json& v, const std::string& path) {
  if (!v.is_array()) wrong_type(v, path, "an array");
  return v;
}

Dims get_dims(const json& v, const std::string& path) {
  Dims dims;
  for (size_t i = 0; i < get_array(v, path).size(); ++i)
    dims.push_back(get_int64(v[i], item_path(path, i)));
  return dims;
}

std::vector<int> get_ints(const json& v, const std::string& path) {
  std::vector<int> ints;
  for (size_t i = 0; i < get_array(v, path).size(); ++i)
    ints.push_back(get_int(v[i], item_path(path, i)));
  return ints;
}

DType get_dtype(const json& v, const std::string& path) {
  std::string name = get_string(v, path);
  if (auto dtype = parse_dtype(name)) return *dtype;
  std::vector<std::string_view> valid;
  for (DType t : kAllDTypes) valid.push_back(dtype_name(t));
  fail("{}: unknown dtype \"{}\"; valid dtypes: {}", path, name, fmt::join(valid, ", "));
}

Object::Object(const json& value, std::string path) : value_(value), path_(std::move(path)) {
  if (!value.is_object()) wrong_type(value, path_, "an object");
}

std::string Object::path(std::string_view key) const {
  return fmt::format("{}.{}", path_, key);
}

const json& Object::at(std::string_view key) const {
  if (const json* v = find(key)) return *v;
  fail("{}: missing field \"{}\"", path_, key);
}

void Object::reject_unknown_fields(const Fields& allowed, std::string_view what) const {
  for (const auto& [key, unused] : value_.items())
    if (!allowed.contains(key))
      fail("{}: unknown field \"{}\" in {}; allowed fields: {}", path(key), key, what,
           fmt::join(allowed, ", "));
}

// ---------------------------------------------------------------------------------------------
// Reading ops

const std::vector<Op>& op_prototypes() {
  static const std::vector<Op> prototypes = [] {
    std::vector<Op> ops{InputOp{}, MatmulOp{}};
    for (UnaryFn fn :
         {UnaryFn::exp, UnaryFn::silu, UnaryFn::gelu, UnaryFn::relu, UnaryFn::sqrt, UnaryFn::rsqrt,
          UnaryFn::square, UnaryFn::neg, UnaryFn::reciprocal, UnaryFn::mul_scalar})
      ops.push_back(UnaryOp{fn});
    for (BinaryFn fn : {BinaryFn::add, BinaryFn::sub, BinaryFn::mul, BinaryFn::div, BinaryFn::pow})
      ops.push_back(BinaryOp{fn});
    for (ReduceFn fn : {ReduceFn::sum, ReduceFn::mean, ReduceFn::max})
      ops.push_back(ReduceOp{fn, 0});
    ops.insert(ops.end(), {RmsNormOp{}, LayerNormOp{}, SoftmaxOp{0}, ConcatOp{0}, SplitOp{0, {}},
                           ReshapeOp{}, PermuteOp{}, EmbeddingOp{}, RopeOp{}, QuantMatmulOp{},
                           PagedAttentionOp{}, FusedOp{}});
    return ops;
  }();
  return prototypes;
}

Op op_from_name(const std::string& name, const std::string& path) {
  std::vector<std::string_view> valid;
  for (const Op& op : op_prototypes()) {
    if (op_name(op) == name) return op;
    valid.push_back(op_name(op));
  }
  fail("{}: unknown op \"{}\"; valid ops: {}", path, name, fmt::join(valid, ", "));
}

Fields attribute_fields(const Op& op) {
  return std::visit(Overloaded{
                        [](const UnaryOp& u) -> Fields {
                          if (u.fn == UnaryFn::mul_scalar) return {"scalar"};
                          return {};
                        },
                        [](const ReduceOp&) -> Fields {
                          return {"dim", "keepdim"};
                        },
                        [](const RmsNormOp&) -> Fields {
                          return {"normalized_shape", "eps", "has_weight"};
                        },
                        [](const LayerNormOp&) -> Fields {
                          return {"normalized_shape", "eps", "has_weight", "has_bias"};
                        },
                        [](const SoftmaxOp&) -> Fields { return {"dim"}; },
                        [](const ConcatOp&) -> Fields { return {"dim"}; },
                        [](const SplitOp&) -> Fields {
                          return {"dim", "sizes"};
                        },
                        [](const ReshapeOp&) -> Fields { return {"shape"}; },
                        [](const PermuteOp&) -> Fields { return {"perm"}; },
                        [](const RopeOp&) -> Fields {
                          return {"theta", "style"};
                        },
                        [](const QuantMatmulOp&) -> Fields {
                          return {"format", "prefetch"};
                        },
                        [](const PagedAttentionOp&) -> Fields { return {"block_tokens"}; },
                        [](const MatmulOp&) -> Fields { return {"library"}; },
                        [](const FusedOp&) -> Fields { return {"body"}; },
                        [](const auto&) -> Fields { return {}; },
                    },
                    op);
}

void read_attributes(Op& op, const Object& node, size_t operands) {
  auto flag = [&](std::string_view key, bool implied) {
    const json* v = node.find(key);
    return v ? get_bool(*v, node.path(key)) : implied;
  };
  auto number = [&](std::string_view key, double fallback) {
    const json* v = node.find(key);
    return v ? get_number(*v, node.path(key)) : fallback;
  };
  auto dim = [&] { return get_int(node.at("dim"), node.path("dim")); };
  auto dims = [&](std::string_view key) { return get_dims(node.at(key), node.path(key)); };
  std::visit(Overloaded{
                 [&](UnaryOp& u) {
                   if (u.fn == UnaryFn::mul_scalar)
                     u.scalar = get_number(node.at("scalar"), node.path("scalar"));
                 },
                 [&](ReduceOp& r) {
                   r.dim = dim();
                   r.keepdim = flag("keepdim", true);
                 },
                 [&](RmsNormOp& n) {
                   n.normalized_shape = dims("normalized_shape");
                   n.eps = number("eps", n.eps);
                   n.has_weight = flag("has_weight", operands >= 2);
                 },
                 [&](LayerNormOp& n) {
                   n.normalized_shape = dims("normalized_shape");
                   n.eps = number("eps", n.eps);
                   n.has_weight = flag("has_weight", operands >= 2);
                   n.has_bias = flag("has_bias", operands >= 3);
                 },
                 [&](SoftmaxOp& s) { s.dim = dim(); },
                 [&](ConcatOp& c) { c.dim = dim(); },
                 [&](SplitOp& s) {
                   s.dim = dim();
                   s.sizes = dims("sizes");
                 },
                 [&](ReshapeOp& r) { r.shape = dims("shape"); },
                 [&](PermuteOp& p) { p.perm = get_ints(node.at("perm"), node.path("perm")); },
                 [&](RopeOp& r) {
                   r.theta = number("theta", r.theta);
                   if (const json* style = node.find("style"))
                     r.style = get_rope_style(*style, node.path("style"));
                 },
                 [&](QuantMatmulOp& q) {
                   const std::string name = get_string(node.at("format"), node.path("format"));
                   const auto format = quant_format_from_name(name);
                   if (!format)
                     fail("{}: unknown quantized format \"{}\"; known: q4_0, q4_1, q8_0, f16, bf16",
                          node.path("format"), name);
                   q.format = *format;
                   q.prefetch = flag("prefetch", true);
                 },
                 [&](PagedAttentionOp& a) {
                   if (const json* v = node.find("block_tokens"))
                     a.block_tokens = get_int64(*v, node.path("block_tokens"));
                 },
                 [](InputOp&) {},
                 [&](MatmulOp& m) { m.library = flag("library", false); },
                 [](BinaryOp&) {},
                 [](EmbeddingOp&) {},
                 [&](FusedOp& f) {
                   f.body = std::make_shared<const BlockGraph>(
                       block_graph_from_json(node.at("body"), node.path("body")));
                 },
             },
             op);
}

void check_declared_type(const Object& object, const TensorType& actual, bool check_shape) {
  if (const json* v = object.find("dtype")) {
    DType declared = get_dtype(*v, object.path("dtype"));
    if (declared != actual.dtype)
      fail("{}: declared {}, but the op produces {}", object.path("dtype"), dtype_name(declared),
           format_type(actual));
  }
  if (const json* v = object.find("shape"); v && check_shape) {
    Dims declared = get_dims(*v, object.path("shape"));
    if (declared != actual.dims)
      fail("{}: declared {}, but the op produces {}", object.path("shape"), format_dims(declared),
           format_type(actual));
  }
}

}  // namespace yirage::ir::json_util
