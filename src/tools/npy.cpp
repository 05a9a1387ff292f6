#include "tools/npy.h"

#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <span>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/error.h"

namespace yirage::tools {
namespace {

static_assert(
    std::endian::native == std::endian::little,
    "elements are copied between .npy files (little-endian) and host tensors as they are");

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kVersionOffset = kMagic.size();
constexpr size_t kHeaderLengthOffset = kVersionOffset + 2;

struct DescrInfo {
  std::string_view descr;
  size_t item_size;
};
constexpr DescrInfo kSupportedDescrs[] = {{"<f4", 4}, {"<f2", 2}, {"<i4", 4},
                                          {"<i8", 8}, {"|i1", 1}, {"|u1", 1}};

std::optional<size_t> item_size(std::string_view descr) {
  for (const DescrInfo& info : kSupportedDescrs)
    if (info.descr == descr) return info.item_size;
  return std::nullopt;
}

struct Header {
  std::string descr;
  ir::Dims shape;
};

// The header is a Python dict literal, e.g. {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), }. This parser takes exactly the subset NumPy writes.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, size_t file_offset, const std::string& path)
      : text_(text), file_offset_(file_offset), path_(path) {}

  Header parse() {
    // Versions 1.0 and 2.0 headers are ASCII; checking first also keeps raw bytes out of errors.
    for (size_t i = 0; i < text_.size(); ++i) {
      auto byte = static_cast<unsigned char>(text_[i]);
      if ((byte < 0x20 && byte != '\n') || byte > 0x7e)
        error_at(i, fmt::format("byte 0x{:02x} is not printable ASCII", byte));
    }
    Header header;
    std::set<std::string> seen;
    skip_space();
    expect('{', "'{': the header must be a dict");
    while (true) {
      skip_space();
      if (consume('}')) break;
      size_t key_at = pos_;
      std::string key = parse_string("a dict key");
      if (!seen.insert(key).second) error_at(key_at, fmt::format("duplicate key '{}'", key));
      skip_space();
      expect(':', "':' after a dict key");
      skip_space();
      parse_value(key, header);
      skip_space();
      if (consume(',')) continue;
      expect('}', "',' or '}' after a dict value");
      break;
    }
    skip_space();
    if (pos_ != text_.size()) error("unexpected text after the header dict");
    for (std::string_view key : {"descr", "fortran_order", "shape"})
      if (!seen.contains(std::string(key))) error_at(0, fmt::format("the header lacks '{}'", key));
    return header;
  }

 private:
  void parse_value(const std::string& key, Header& header) {
    size_t value_at = pos_;
    if (key == "descr") {
      if (peek() != '\'' && peek() != '"')
        error("'descr' must be a string; structured dtypes are not supported");
      header.descr = parse_string("the dtype");
      if (!item_size(header.descr))
        error_at(value_at, fmt::format("unsupported dtype '{}'; supported: {}", header.descr,
                                       supported_descrs()));
    } else if (key == "fortran_order") {
      if (parse_bool())
        error_at(value_at,
                 "Fortran-order arrays are not supported; save np.ascontiguousarray(a) instead");
    } else if (key == "shape") {
      header.shape = parse_shape();
    } else {
      error_at(pos_ - 1, fmt::format("unknown header key '{}'", key));
    }
  }

  static std::string supported_descrs() {
    std::vector<std::string_view> names;
    for (const DescrInfo& info : kSupportedDescrs) names.push_back(info.descr);
    return fmt::format("{}", fmt::join(names, ", "));
  }

  std::string parse_string(std::string_view what) {
    char quote = peek();
    if (quote != '\'' && quote != '"') error(fmt::format("expected {} as a quoted string", what));
    size_t start = ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') error("escapes in header strings are not supported");
      ++pos_;
    }
    if (pos_ == text_.size()) error_at(start - 1, "unterminated string");
    return std::string(text_.substr(start, pos_++ - start));
  }

  bool parse_bool() {
    for (auto [word, value] : {std::pair{std::string_view("True"), true}, {"False", false}}) {
      if (text_.substr(pos_).starts_with(word)) {
        pos_ += word.size();
        return value;
      }
    }
    error("expected True or False");
  }

  ir::Dims parse_shape() {
    expect('(', "the shape as a tuple");
    ir::Dims dims;
    bool trailing_comma = false;
    while (true) {
      skip_space();
      if (consume(')')) break;
      dims.push_back(parse_dim());
      skip_space();
      trailing_comma = consume(',');
      if (trailing_comma) continue;
      expect(')', "',' or ')' in the shape");
      break;
    }
    if (dims.size() == 1 && !trailing_comma)
      error("a one-element shape needs a trailing comma, as in (5,)");
    // A zero dim makes the array empty, but the other dims still reach code that multiplies them
    // all; bound their product so no caller can overflow.
    int64_t nonzero_product = 1;
    for (int64_t d : dims) {
      if (d == 0) continue;
      if (d > ir::kMaxElements / nonzero_product)
        error(fmt::format("shape {} has more than {} elements", ir::format_dims(dims),
                          ir::kMaxElements));
      nonzero_product *= d;
    }
    return dims;
  }

  int64_t parse_dim() {
    int64_t value = 0;
    const char* begin = text_.data() + pos_;
    auto [end, ec] = std::from_chars(begin, text_.data() + text_.size(), value);
    if (ec != std::errc() || value < 0) error("expected a non-negative integer dimension");
    pos_ += size_t(end - begin);
    return value;
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool consume(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c, std::string_view what) {
    if (!consume(c)) error(fmt::format("expected {}", what));
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n')) ++pos_;
  }
  [[noreturn]] void error(std::string_view what) const { error_at(pos_, what); }
  [[noreturn]] void error_at(size_t pos, std::string_view what) const {
    fail("{}: byte {}: bad .npy header: {}", path_, file_offset_ + pos, what);
  }

  std::string_view text_;
  size_t file_offset_;
  const std::string& path_;
  size_t pos_ = 0;
};

uint32_t read_le(const unsigned char* bytes, size_t count) {
  uint32_t value = 0;
  for (size_t i = count; i-- > 0;) value = (value << 8) | bytes[i];
  return value;
}

// Element count times item size, or nullopt if it overflows.
std::optional<uint64_t> data_bytes(const ir::Dims& shape, size_t item) {
  uint64_t total = item;
  for (int64_t d : shape) {
    if (d != 0 && total > std::numeric_limits<uint64_t>::max() / uint64_t(d)) return std::nullopt;
    total *= uint64_t(d);
  }
  return total;
}

std::string shape_tuple(const ir::Dims& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

template <typename T>
T load(const std::vector<std::byte>& data, size_t i) {
  T value;
  std::memcpy(&value, data.data() + i * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void store(std::vector<std::byte>& data, size_t i, T value) {
  std::memcpy(data.data() + i * sizeof(T), &value, sizeof(T));
}

// Converts '<f4' elements to a 16-bit float type, refusing any value the conversion would change.
void narrow_floats(const NpyArray& array, ir::HostTensor& tensor, uint16_t (*to16)(float),
                   float (*from16)(uint16_t), const std::string& path) {
  for (size_t i = 0; i < size_t(tensor.size()); ++i) {
    float value = load<float>(array.data, i);
    uint16_t narrow = to16(value);
    if (std::bit_cast<uint32_t>(from16(narrow)) != std::bit_cast<uint32_t>(value))
      fail("{}: element {} ({}) is not exactly representable in {}; round it in NumPy first", path,
           i, value, ir::dtype_name(tensor.type.dtype));
    store<uint16_t>(tensor.bytes, i, narrow);
  }
}

void narrow_ints(const NpyArray& array, ir::HostTensor& tensor, const std::string& path) {
  for (size_t i = 0; i < size_t(tensor.size()); ++i) {
    int64_t value = load<int64_t>(array.data, i);
    if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max())
      fail("{}: element {} ({}) does not fit in i32", path, i, value);
    store<int32_t>(tensor.bytes, i, int32_t(value));
  }
}

std::vector<std::string_view> accepted_descrs(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::f32: return {"<f4"};
    case ir::DType::f16: return {"<f2", "<f4"};
    case ir::DType::bf16: return {"<f4"};
    case ir::DType::i32: return {"<i4", "<i8"};
    case ir::DType::i8: return {"|i1"};
    case ir::DType::u8: return {"|u1"};
  }
  return {};
}

// The descr whose elements are the tensor's bytes as they are.
std::string_view same_layout_descr(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::f32: return "<f4";
    case ir::DType::f16: return "<f2";
    case ir::DType::bf16: return "";  // NumPy has no bfloat16
    case ir::DType::i32: return "<i4";
    case ir::DType::i8: return "|i1";
    case ir::DType::u8: return "|u1";
  }
  return "";
}

}  // namespace

NpyArray parse_npy(std::span<const std::byte> bytes, const std::string& path) {
  const uint64_t file_size = bytes.size();
  const auto* raw = reinterpret_cast<const unsigned char*>(bytes.data());
  if (file_size < kMagic.size() ||
      std::string_view(reinterpret_cast<const char*>(raw), kMagic.size()) != kMagic)
    fail("{}: byte 0: not an .npy file (no \\x93NUMPY magic)", path);
  if (file_size < kHeaderLengthOffset)
    fail("{}: byte {}: the file ends inside the .npy version", path, file_size);
  unsigned major = raw[kVersionOffset], minor = raw[kVersionOffset + 1];
  if ((major != 1 && major != 2) || minor != 0)
    fail("{}: byte {}: .npy version {}.{} is not supported (1.0 and 2.0 are)", path, kVersionOffset,
         major, minor);
  size_t length_bytes = major == 1 ? 2 : 4;
  size_t header_offset = kHeaderLengthOffset + length_bytes;
  if (file_size < header_offset)
    fail("{}: byte {}: the file ends inside the header length", path, kHeaderLengthOffset);
  uint64_t header_length = read_le(raw + kHeaderLengthOffset, length_bytes);
  uint64_t data_offset = header_offset + header_length;
  if (data_offset > file_size)
    fail("{}: byte {}: header length {} runs past the end of the file ({} bytes)", path,
         kHeaderLengthOffset, header_length, file_size);

  std::string header_text(reinterpret_cast<const char*>(raw) + header_offset, header_length);
  Header header = HeaderParser(header_text, header_offset, path).parse();

  std::optional<uint64_t> expected = data_bytes(header.shape, *item_size(header.descr));
  uint64_t available = file_size - data_offset;
  if (!expected || *expected > available)
    fail("{}: byte {}: truncated: shape {} of '{}' needs {} data bytes, the file has {}", path,
         data_offset, ir::format_dims(header.shape), header.descr,
         expected ? fmt::format("{}", *expected) : "too many", available);
  if (*expected < available)
    fail("{}: byte {}: {} unexpected bytes after the data", path, data_offset + *expected,
         available - *expected);

  auto data = bytes.subspan(data_offset, *expected);
  return NpyArray{std::move(header.descr), std::move(header.shape),
                  std::vector<std::byte>(data.begin(), data.end())};
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::error_code ec;
  uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) fail("{}: cannot read its size: {}", path, ec.message());
  std::vector<std::byte> bytes(file_size);
  in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(file_size));
  if (!in) fail("{}: byte 0: reading the file failed", path);
  return parse_npy(bytes, path);
}

void write_npy(const std::string& path, const NpyArray& array) {
  std::optional<size_t> item = item_size(array.descr);
  if (!item) fail("{}: cannot write dtype '{}' as .npy", path, array.descr);
  if (data_bytes(array.shape, *item) != array.data.size())
    fail("{}: {} data bytes do not fill shape {} of '{}'", path, array.data.size(),
         ir::format_dims(array.shape), array.descr);

  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                   array.descr, shape_tuple(array.shape));
  // NumPy pads the header with spaces and a final newline so the data starts 64-byte aligned.
  size_t unpadded = kHeaderLengthOffset + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  if (header.size() > 0xffff)
    fail("{}: a shape of rank {} is too long for an .npy header", path, array.shape.size());

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("{}: cannot create: {}", path, std::strerror(errno));
  const unsigned char preamble[] = {0x93,
                                    'N',
                                    'U',
                                    'M',
                                    'P',
                                    'Y',
                                    1,
                                    0,
                                    static_cast<unsigned char>(header.size() & 0xff),
                                    static_cast<unsigned char>(header.size() >> 8)};
  out.write(reinterpret_cast<const char*>(preamble), sizeof(preamble));
  out.write(header.data(), std::streamsize(header.size()));
  out.write(reinterpret_cast<const char*>(array.data.data()), std::streamsize(array.data.size()));
  out.close();
  if (!out) fail("{}: writing failed: {}", path, std::strerror(errno));
}

ir::HostTensor tensor_from_npy(const NpyArray& array, const ir::TensorType& expected,
                               const std::string& input, const std::string& path) {
  if (array.shape != expected.dims)
    fail("{}: shape {} does not match input '{}' of type {}", path, ir::format_dims(array.shape),
         input, ir::format_type(expected));
  std::vector<std::string_view> accepted = accepted_descrs(expected.dtype);
  if (std::find(accepted.begin(), accepted.end(), array.descr) == accepted.end())
    fail("{}: dtype '{}' cannot feed input '{}' of type {} (accepted: {})", path, array.descr,
         input, ir::format_type(expected), fmt::join(accepted, ", "));

  ir::HostTensor tensor(expected);
  if (array.descr == same_layout_descr(expected.dtype))
    tensor.bytes = array.data;
  else if (expected.dtype == ir::DType::f16)
    narrow_floats(array, tensor, ir::f32_to_f16, ir::f16_to_f32, path);
  else if (expected.dtype == ir::DType::bf16)
    narrow_floats(array, tensor, ir::f32_to_bf16, ir::bf16_to_f32, path);
  else
    narrow_ints(array, tensor, path);
  return tensor;
}

NpyArray npy_from_tensor(const ir::HostTensor& tensor) {
  NpyArray array{std::string(same_layout_descr(tensor.type.dtype)), tensor.type.dims, {}};
  if (!array.descr.empty()) {
    array.data = tensor.bytes;
    return array;
  }
  array.descr = "<f4";
  array.data.resize(size_t(tensor.size()) * sizeof(float));
  for (size_t i = 0; i < size_t(tensor.size()); ++i)
    store<float>(array.data, i, tensor.get(int64_t(i)));
  return array;
}

}  // namespace yirage::tools
