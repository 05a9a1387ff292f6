#include "llm/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "support/error.h"

namespace yirage::llm {

// ---------------------------------------------------------------------------------------------
// Values.

std::string_view gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::Bool: return "bool";
    case GgufType::String: return "string";
    case GgufType::Array: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "unknown";
}

namespace {

bool is_signed_integer(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}
bool is_unsigned_integer(GgufType t) {
  return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64;
}

// Byte width of a scalar type; 0 for string and array.
size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::Bool: return 1;
    case GgufType::U16:
    case GgufType::I16: return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32: return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64: return 8;
    case GgufType::String:
    case GgufType::Array: return 0;
  }
  return 0;
}

uint64_t load_le(const std::byte* p, size_t width) {
  uint64_t v = 0;
  std::memcpy(&v, p, width);  // GGUF is little-endian, as is every host YiRage supports
  return v;
}

// Sign-extends the `width`-byte integer in the low bits of `bits`.
int64_t sign_extend(uint64_t bits, size_t width) {
  if (width == 8) return static_cast<int64_t>(bits);
  const uint64_t sign = uint64_t{1} << (width * 8 - 1);
  return static_cast<int64_t>((bits ^ sign) - sign);
}

double float_from_bits(uint64_t bits, GgufType t) {
  if (t == GgufType::F32) {
    float f;
    const auto b = static_cast<uint32_t>(bits);
    std::memcpy(&f, &b, sizeof f);
    return f;
  }
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

}  // namespace

bool GgufValue::is_integer() const {
  return is_signed_integer(type_) || is_unsigned_integer(type_);
}

template <typename... Args>
void GgufValue::fail_here(fmt::format_string<Args...> format, Args&&... args) const {
  fail("{}: offset {}: metadata '{}': {}", source_ ? *source_ : "<memory>", offset_, key_,
       fmt::format(format, std::forward<Args>(args)...));
}

void GgufValue::wrong_type(std::string_view wanted) const {
  fail_here("expected {}, found {}", wanted, gguf_type_name(type_));
}

uint64_t GgufValue::as_u64() const {
  if (is_unsigned_integer(type_)) return bits_;
  if (is_signed_integer(type_)) {
    const int64_t v = sign_extend(bits_, scalar_size(type_));
    if (v < 0) fail_here("value {} is negative", v);
    return static_cast<uint64_t>(v);
  }
  wrong_type("an integer");
}

int64_t GgufValue::as_i64() const {
  if (is_signed_integer(type_)) return sign_extend(bits_, scalar_size(type_));
  if (is_unsigned_integer(type_)) {
    if (bits_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail_here("value {} does not fit in i64", bits_);
    }
    return static_cast<int64_t>(bits_);
  }
  wrong_type("an integer");
}

uint32_t GgufValue::as_u32() const {
  const uint64_t v = as_u64();
  if (v > std::numeric_limits<uint32_t>::max()) {
    fail_here("value {} does not fit in u32", v);
  }
  return static_cast<uint32_t>(v);
}

int32_t GgufValue::as_i32() const {
  const int64_t v = as_i64();
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    fail_here("value {} does not fit in i32", v);
  }
  return static_cast<int32_t>(v);
}

double GgufValue::as_f64() const {
  if (type_ != GgufType::F32 && type_ != GgufType::F64) wrong_type("a float");
  return float_from_bits(bits_, type_);
}

bool GgufValue::as_bool() const {
  if (type_ != GgufType::Bool) wrong_type("bool");
  return bits_ != 0;
}

std::string_view GgufValue::as_string() const {
  if (type_ != GgufType::String) wrong_type("string");
  return string_;
}

void GgufValue::require_array(std::string_view wanted) const {
  if (type_ != GgufType::Array) wrong_type(wanted);
}

GgufType GgufValue::element_type() const {
  require_array("an array");
  return element_type_;
}

size_t GgufValue::size() const {
  require_array("an array");
  return count_;
}

std::string_view GgufValue::string_at(size_t i) const {
  require_array("an array of strings");
  if (element_type_ != GgufType::String) {
    fail_here("expected an array of strings, found an array of {}", gguf_type_name(element_type_));
  }
  if (i >= count_) fail_here("index {} out of range (size {})", i, count_);
  return strings_[i];
}

const GgufValue& GgufValue::array_at(size_t i) const {
  require_array("an array of arrays");
  if (element_type_ != GgufType::Array) {
    fail_here("expected an array of arrays, found an array of {}", gguf_type_name(element_type_));
  }
  if (i >= count_) fail_here("index {} out of range (size {})", i, count_);
  return arrays_[i];
}

std::vector<float> GgufValue::to_f32_vector() const {
  require_array("an array of floats");
  if (element_type_ != GgufType::F32 && element_type_ != GgufType::F64) {
    fail_here("expected an array of floats, found an array of {}", gguf_type_name(element_type_));
  }
  const size_t width = scalar_size(element_type_);
  std::vector<float> out(count_);
  for (size_t i = 0; i < count_; ++i) {
    out[i] =
        static_cast<float>(float_from_bits(load_le(elements_ + i * width, width), element_type_));
  }
  return out;
}

int64_t GgufValue::integer_element(size_t i) const {
  const size_t width = scalar_size(element_type_);
  const uint64_t bits = load_le(elements_ + i * width, width);
  if (is_signed_integer(element_type_)) return sign_extend(bits, width);
  if (bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    fail_here("element {} value {} does not fit in i64", i, bits);
  }
  return static_cast<int64_t>(bits);
}

std::vector<int64_t> GgufValue::to_i64_vector() const {
  require_array("an array of integers");
  if (!is_signed_integer(element_type_) && !is_unsigned_integer(element_type_)) {
    fail_here("expected an array of integers, found an array of {}", gguf_type_name(element_type_));
  }
  std::vector<int64_t> out(count_);
  for (size_t i = 0; i < count_; ++i) out[i] = integer_element(i);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Parsing.

namespace {

constexpr uint32_t kMaxDims = 4;            // GGML_MAX_DIMS
constexpr size_t kMaxTensorNameBytes = 63;  // GGML_MAX_NAME less the terminating NUL
constexpr size_t kMaxKeyBytes = 65535;      // the GGUF spec bounds keys to 2^16 - 1 bytes
constexpr int kMaxArrayDepth = 8;           // bounds recursion on hostile nesting
// Smallest encodings, used to reject counts the remaining bytes cannot hold before allocating:
// a key-value pair is a 1-byte key (8 + 1), a type (4) and a 1-byte value; a tensor info is a
// 1-byte name (8 + 1), n_dims (4), one dim (8), a type (4) and an offset (8).
constexpr uint64_t kMinKeyValueBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

}  // namespace

class GgufParser {
 public:
  GgufParser(GgufFile& file, std::span<const std::byte> bytes)
      : file_(file), bytes_(bytes), source_(std::make_shared<const std::string>(file.source_)) {}

  void parse() {
    parse_header();
    for (uint64_t i = 0; i < kv_count_; ++i) parse_key_value();
    index_metadata();
    read_alignment();
    for (uint64_t i = 0; i < tensor_count_; ++i) parse_tensor_info();
    place_tensor_data();
    index_tensors();
  }

 private:
  struct PendingTensor {
    uint64_t info_offset;  // where its info starts, for error messages
    uint64_t data_offset;  // relative to the data section
    uint64_t byte_size;
  };

  template <typename... Args>
  [[noreturn]] void fail_at(uint64_t offset, fmt::format_string<Args...> format, Args&&... args) {
    fail("{}: offset {}: {}", file_.source_, offset,
         fmt::format(format, std::forward<Args>(args)...));
  }

  uint64_t remaining() const { return bytes_.size() - pos_; }

  void need(uint64_t n, std::string_view what) {
    if (n > remaining()) {
      fail_at(pos_, "truncated: {} needs {} bytes, {} left", what, n, remaining());
    }
  }

  uint64_t read_uint(size_t width, std::string_view what) {
    need(width, what);
    const uint64_t v = load_le(bytes_.data() + pos_, width);
    pos_ += width;
    return v;
  }
  uint32_t read_u32(std::string_view what) { return static_cast<uint32_t>(read_uint(4, what)); }
  uint64_t read_u64(std::string_view what) { return read_uint(8, what); }

  std::string_view read_string(std::string_view what) {
    const uint64_t at = pos_;
    const uint64_t length = read_u64(what);
    if (length > remaining()) {
      fail_at(at, "{} length {} exceeds the {} bytes left in the file", what, length, remaining());
    }
    std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return s;
  }

  // Rejects counts whose smallest encoding cannot fit in what is left, before anything is
  // allocated for them.
  void check_count(uint64_t at, uint64_t count, uint64_t min_bytes_each, std::string_view what) {
    if (count > remaining() / min_bytes_each) {
      fail_at(at, "{} {} exceeds what the file can hold", what, count);
    }
  }

  GgufType read_value_type(std::string_view what) {
    const uint64_t at = pos_;
    const uint32_t raw = read_u32(what);
    if (raw > static_cast<uint32_t>(GgufType::F64)) fail_at(at, "unknown {} {}", what, raw);
    return static_cast<GgufType>(raw);
  }

  void parse_header() {
    if (bytes_.size() < 4 || std::memcmp(bytes_.data(), "GGUF", 4) != 0) {
      fail_at(0, "not a GGUF file (bad magic)");
    }
    pos_ = 4;
    const uint32_t version = read_u32("version");
    if (version == 1) fail_at(4, "GGUF version 1 is not supported (only 2 and 3)");
    if (version != 2 && version != 3) {
      // A big-endian file reads as a huge version number here.
      fail_at(4, "unsupported GGUF version {} (only little-endian versions 2 and 3)", version);
    }
    file_.version_ = version;
    const uint64_t tensor_count_at = pos_;
    tensor_count_ = read_u64("tensor count");
    const uint64_t kv_count_at = pos_;
    kv_count_ = read_u64("metadata count");
    check_count(kv_count_at, kv_count_, kMinKeyValueBytes, "metadata count");
    check_count(tensor_count_at, tensor_count_, kMinTensorInfoBytes, "tensor count");
    file_.metadata_.reserve(kv_count_);
    file_.tensors_.reserve(tensor_count_);
  }

  void parse_key_value() {
    const uint64_t at = pos_;
    const std::string_view key = read_string("metadata key");
    if (key.empty()) fail_at(at, "empty metadata key");
    if (key.size() > kMaxKeyBytes) fail_at(at, "metadata key of {} bytes is too long", key.size());
    const GgufType type = read_value_type("metadata value type");
    GgufValue value;
    value.source_ = source_;
    value.offset_ = at;
    value.key_ = std::string(key);
    parse_value(value, type, 0);
    file_.metadata_.push_back(std::move(value));
    key_offsets_.push_back(at);
  }

  void parse_value(GgufValue& value, GgufType type, int depth) {
    value.type_ = type;
    if (type == GgufType::String) {
      value.string_ = read_string("string value");
    } else if (type == GgufType::Array) {
      parse_array(value, depth);
    } else {
      value.bits_ = read_uint(scalar_size(type), "value");
      if (type == GgufType::Bool && value.bits_ > 1) {
        fail_at(pos_ - 1, "bool value {} is neither 0 nor 1", value.bits_);
      }
    }
  }

  void parse_array(GgufValue& value, int depth) {
    const uint64_t at = pos_;
    if (depth >= kMaxArrayDepth) fail_at(at, "arrays nested deeper than {}", kMaxArrayDepth);
    value.element_type_ = read_value_type("array element type");
    const uint64_t count_at = pos_;
    value.count_ = read_u64("array length");
    const size_t width = scalar_size(value.element_type_);
    // Strings take at least their 8-byte length, arrays their type and length.
    const uint64_t min_each = width != 0 ? width : value.element_type_ == GgufType::String ? 8 : 12;
    check_count(count_at, value.count_, min_each, "array length");
    if (width != 0) {
      value.elements_ = bytes_.data() + pos_;
      if (value.element_type_ == GgufType::Bool) check_bools(value.elements_, value.count_);
      pos_ += value.count_ * width;
    } else if (value.element_type_ == GgufType::String) {
      value.strings_.reserve(value.count_);
      for (uint64_t i = 0; i < value.count_; ++i) value.strings_.push_back(read_string("string"));
    } else {
      value.arrays_.resize(value.count_);
      for (uint64_t i = 0; i < value.count_; ++i) {
        GgufValue& element = value.arrays_[i];
        element.source_ = source_;
        element.offset_ = pos_;
        element.key_ = fmt::format("{}[{}]", value.key_, i);
        parse_value(element, GgufType::Array, depth + 1);
      }
    }
  }

  void check_bools(const std::byte* elements, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) {
      if (std::to_integer<uint8_t>(elements[i]) > 1) {
        fail_at(pos_ + i, "bool value {} is neither 0 nor 1", std::to_integer<int>(elements[i]));
      }
    }
  }

  void index_metadata() {
    for (size_t i = 0; i < file_.metadata_.size(); ++i) {
      const auto [it, inserted] = file_.metadata_index_.emplace(file_.metadata_[i].key_, i);
      if (!inserted) fail_at(key_offsets_[i], "duplicate metadata key '{}'", it->first);
    }
  }

  void read_alignment() {
    const GgufValue* value = file_.find("general.alignment");
    if (value == nullptr) return;
    const uint64_t at = key_offsets_[file_.metadata_index_.at("general.alignment")];
    if (value->type() != GgufType::U32) {
      fail_at(at, "general.alignment must be u32, found {}", gguf_type_name(value->type()));
    }
    const uint64_t alignment = value->as_u64();
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
      fail_at(at, "general.alignment {} is not a power of two", alignment);
    }
    file_.alignment_ = alignment;
  }

  void parse_tensor_info() {
    const uint64_t at = pos_;
    const std::string_view name = read_string("tensor name");
    if (name.empty()) fail_at(at, "empty tensor name");
    if (name.size() > kMaxTensorNameBytes) {
      fail_at(at, "tensor name of {} bytes exceeds {}", name.size(), kMaxTensorNameBytes);
    }
    const uint64_t dims_at = pos_;
    const uint32_t n_dims = read_u32("tensor dimension count");
    if (n_dims == 0 || n_dims > kMaxDims) {
      fail_at(dims_at, "tensor '{}' has {} dimensions (1 to {} allowed)", name, n_dims, kMaxDims);
    }
    std::vector<int64_t> dims(n_dims);
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = pos_;
      const uint64_t dim = read_u64("tensor dimension");
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail_at(dim_at, "tensor '{}' dimension {} is {} (must be positive)", name, d, dim);
      }
      if (elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim) {
        fail_at(dim_at, "tensor '{}' element count overflows", name);
      }
      elements *= dim;
      dims[d] = static_cast<int64_t>(dim);
    }
    const uint64_t type_at = pos_;
    const uint32_t type_id = read_u32("tensor type");
    const GgmlTypeTraits* traits = find_ggml_type(type_id);
    if (traits == nullptr) fail_at(type_at, "tensor '{}' has unknown ggml type {}", name, type_id);
    if (dims[0] % traits->block_size != 0) {
      fail_at(dims_at, "tensor '{}' row of {} elements is not a multiple of the {} block size {}",
              name, dims[0], traits->name, traits->block_size);
    }
    const uint64_t blocks = elements / traits->block_size;
    if (blocks > std::numeric_limits<uint64_t>::max() / traits->bytes_per_block) {
      fail_at(dims_at, "tensor '{}' byte size overflows", name);
    }
    const uint64_t offset_at = pos_;
    const uint64_t offset = read_u64("tensor data offset");
    if (offset % file_.alignment_ != 0) {
      fail_at(offset_at, "tensor '{}' data offset {} is not a multiple of the alignment {}", name,
              offset, file_.alignment_);
    }
    file_.tensors_.push_back(
        GgufTensor{std::string(name), traits->type, std::move(dims), elements, {}});
    pending_.push_back({at, offset, blocks * traits->bytes_per_block});
  }

  void place_tensor_data() {
    const uint64_t alignment = file_.alignment_;
    const uint64_t padding = (alignment - pos_ % alignment) % alignment;
    // A file without tensors may end right after its metadata, without padding.
    if (file_.tensors_.empty() && padding > remaining()) {
      file_.data_offset_ = bytes_.size();
      return;
    }
    need(padding, "padding before the tensor data");
    file_.data_offset_ = pos_ + padding;
    const uint64_t data_size = bytes_.size() - file_.data_offset_;
    for (size_t i = 0; i < pending_.size(); ++i) {
      const PendingTensor& p = pending_[i];
      if (p.data_offset > data_size || p.byte_size > data_size - p.data_offset) {
        fail_at(p.info_offset, "tensor '{}' data [{}, {}) lies outside the {}-byte data section",
                file_.tensors_[i].name, p.data_offset, p.data_offset + p.byte_size, data_size);
      }
      file_.tensors_[i].data = bytes_.subspan(file_.data_offset_ + p.data_offset, p.byte_size);
    }
    check_overlaps();
  }

  void check_overlaps() {
    std::vector<size_t> order(pending_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return pending_[a].data_offset < pending_[b].data_offset;
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const PendingTensor& prev = pending_[order[k - 1]];
      const PendingTensor& next = pending_[order[k]];
      if (next.data_offset < prev.data_offset + prev.byte_size) {
        fail_at(pending_[order[k]].info_offset, "tensor '{}' data overlaps tensor '{}'",
                file_.tensors_[order[k]].name, file_.tensors_[order[k - 1]].name);
      }
    }
  }

  void index_tensors() {
    for (size_t i = 0; i < file_.tensors_.size(); ++i) {
      const auto [it, inserted] = file_.tensor_index_.emplace(file_.tensors_[i].name, i);
      if (!inserted) fail_at(pending_[i].info_offset, "duplicate tensor name '{}'", it->first);
    }
  }

  GgufFile& file_;
  std::span<const std::byte> bytes_;
  std::shared_ptr<const std::string> source_;  // shared by every value, for its errors
  uint64_t pos_ = 0;
  uint64_t kv_count_ = 0;
  uint64_t tensor_count_ = 0;
  std::vector<uint64_t> key_offsets_;
  std::vector<PendingTensor> pending_;
};

// ---------------------------------------------------------------------------------------------
// File.

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::string& path) {
  MappedFile mapping = MappedFile::open(path);
  GgufFile file = from_memory(mapping.bytes(), path);
  file.mapping_ = std::move(mapping);
  return file;
}

GgufFile GgufFile::from_memory(std::span<const std::byte> bytes, std::string source) {
  GgufFile file;
  file.source_ = std::move(source);
  GgufParser(file, bytes).parse();
  return file;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second];
}

const GgufValue& GgufFile::get(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) fail("{}: missing GGUF metadata '{}'", source_, key);
  return *value;
}

std::string_view GgufFile::get_string(std::string_view key) const {
  return get(key).as_string();
}
uint32_t GgufFile::get_u32(std::string_view key) const {
  return get(key).as_u32();
}
uint32_t GgufFile::get_u32_or(std::string_view key, uint32_t fallback) const {
  const GgufValue* value = find(key);
  return value == nullptr ? fallback : value->as_u32();
}
float GgufFile::get_f32(std::string_view key) const {
  return static_cast<float>(get(key).as_f64());
}
bool GgufFile::get_bool_or(std::string_view key, bool fallback) const {
  const GgufValue* value = find(key);
  return value == nullptr ? fallback : value->as_bool();
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(std::string_view name) const {
  const GgufTensor* t = find_tensor(name);
  if (t == nullptr) fail("{}: no tensor named '{}'", source_, name);
  return *t;
}

std::vector<float> GgufFile::dequantize(const GgufTensor& tensor) const {
  std::vector<float> out(tensor.element_count);
  llm::dequantize(tensor.type, tensor.data, out,
                  fmt::format("{}: tensor '{}'", source_, tensor.name));
  return out;
}

}  // namespace yirage::llm
