#include "llm/unicode.h"

#include <algorithm>
#include <span>

namespace yirage::llm::unicode {
namespace {

struct CodepointRange {
  uint32_t first;
  uint32_t last;
};

#include "llm/unicode_tables.inc"

bool in_ranges(std::span<const CodepointRange> ranges, uint32_t cp) {
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                                   [](uint32_t c, const CodepointRange& r) { return c < r.first; });
  return it != ranges.begin() && cp <= std::prev(it)->last;
}

uint8_t byte(std::string_view text, size_t i) {
  return static_cast<uint8_t>(text[i]);
}
bool is_continuation(std::string_view text, size_t i) {
  return i < text.size() && (byte(text, i) & 0xC0) == 0x80;
}

}  // namespace

uint32_t decode_lenient(std::string_view text, size_t& pos) {
  const uint8_t lead = byte(text, pos);
  size_t length;
  uint32_t cp;
  if (lead < 0x80) {
    ++pos;
    return lead;
  } else if ((lead & 0xE0) == 0xC0) {
    length = 2;
    cp = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    cp = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    cp = lead & 0x07;
  } else {
    ++pos;  // a stray continuation byte or an invalid lead byte
    return kReplacement;
  }
  for (size_t i = 1; i < length; ++i) {
    if (!is_continuation(text, pos + i)) {
      ++pos;
      return kReplacement;
    }
    cp = (cp << 6) | (byte(text, pos + i) & 0x3F);
  }
  pos += length;
  return cp;
}

std::vector<uint32_t> decode_lenient(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) out.push_back(decode_lenient(text, pos));
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF) cp = kReplacement;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

int valid_sequence_length(std::string_view text, size_t pos) {
  const uint8_t lead = byte(text, pos);
  if (lead < 0x80) return 1;
  int length;
  uint8_t low = 0x80, high = 0xBF;  // allowed range of the second byte (RFC 3629 table)
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // overlong
    if (lead == 0xED) high = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // overlong
    if (lead == 0xF4) high = 0x8F;  // beyond U+10FFFF
  } else {
    return -1;
  }
  for (int i = 1; i < length; ++i) {
    if (pos + i >= text.size()) return 0;
    const uint8_t b = byte(text, pos + i);
    const uint8_t lo = i == 1 ? low : 0x80;
    const uint8_t hi = i == 1 ? high : 0xBF;
    if (b < lo || b > hi) return -1;
  }
  return length;
}

bool is_letter(uint32_t cp) {
  return in_ranges(kLetterRanges, cp);
}
bool is_number(uint32_t cp) {
  return in_ranges(kNumberRanges, cp);
}

bool is_whitespace(uint32_t cp) {
  // Unicode's White_Space property, as llama.cpp's \s.
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace yirage::llm::unicode
