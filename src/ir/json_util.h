// Internal to the IR module: the JSON helpers that json.cpp (kernel graphs) and block_json.cpp
// (block graphs) share. Readers throw yirage::Error naming the JSON path of the bad value.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/block_graph.h"
#include "ir/kernel_graph.h"

namespace yirage::ir::json_util {

using nlohmann::json;
using nlohmann::ordered_json;

using Fields = std::set<std::string_view>;

// Writing

void write_type(ordered_json& j, const TensorType& type);
// The attribute fields of a kernel-level op, as documented in json.cpp.
void write_attributes(ordered_json& j, const Op& op);

// Reading values

[[noreturn]] void wrong_type(const json& v, const std::string& path, std::string_view expected);
std::string item_path(const std::string& path, size_t index);
std::string get_string(const json& v, const std::string& path);
bool get_bool(const json& v, const std::string& path);
double get_number(const json& v, const std::string& path);
int64_t get_int64(const json& v, const std::string& path);
int get_int(const json& v, const std::string& path);
const json& get_array(const json& v, const std::string& path);
Dims get_dims(const json& v, const std::string& path);
std::vector<int> get_ints(const json& v, const std::string& path);
DType get_dtype(const json& v, const std::string& path);

// A JSON object under read, with its path for error messages.
class Object {
 public:
  Object(const json& value, std::string path);

  const std::string& path() const { return path_; }
  std::string path(std::string_view key) const;

  const json* find(std::string_view key) const {
    auto it = value_.find(key);
    return it == value_.end() ? nullptr : &*it;
  }

  const json& at(std::string_view key) const;

  // `what` names the kind of object in the message ("a node with op 'sum'").
  void reject_unknown_fields(const Fields& allowed, std::string_view what) const;

 private:
  const json& value_;
  std::string path_;
};

// Reading ops

// One kernel-level op of each name, with placeholder attributes that the reader overwrites.
const std::vector<Op>& op_prototypes();
Op op_from_name(const std::string& name, const std::string& path);
Fields attribute_fields(const Op& op);
// Reads the attributes of `op` from `node`; `operands` is the number of inputs, which implies
// the norms' has_weight/has_bias when they are absent.
void read_attributes(Op& op, const Object& node, size_t operands);
// Checks the optional "dtype"/"shape" of `object` against the inferred `actual` type.
void check_declared_type(const Object& object, const TensorType& actual, bool check_shape);

// Block graphs (block_json.cpp), also written and read as the body of a fused kernel-graph node.
ordered_json block_graph_json(const BlockGraph& graph);

}  // namespace yirage::ir::json_util
