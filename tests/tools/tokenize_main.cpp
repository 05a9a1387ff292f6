// Test-only tool: tokenizes stdin with a GGUF model's tokenizer so that Python tests can compare
// YiRage with llama.cpp.
//
//   yirage_tokenize MODEL [--no-add-special] [--parse-special]          stdin text -> [ids]
//   yirage_tokenize MODEL --jsonl [--no-add-special] [--parse-special]  one JSON string per line
//   yirage_tokenize MODEL --decode [--render-special]                   [ids] -> raw bytes
//   yirage_tokenize MODEL --decode --jsonl [--render-special]           one [ids] per line -> hex
#include <iostream>
#include <iterator>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "llm/llm.h"
#include "support/error.h"

namespace {

struct Options {
  std::string model;
  bool jsonl = false;
  bool decode = false;
  bool render_special = false;
  yirage::llm::EncodeOptions encode;
};

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--jsonl") {
      o.jsonl = true;
    } else if (arg == "--decode") {
      o.decode = true;
    } else if (arg == "--render-special") {
      o.render_special = true;
    } else if (arg == "--no-add-special") {
      o.encode.add_special = false;
    } else if (arg == "--parse-special") {
      o.encode.parse_special = true;
    } else if (!arg.starts_with("--") && o.model.empty()) {
      o.model = arg;
    } else {
      yirage::fail("yirage_tokenize: unexpected argument '{}'", arg);
    }
  }
  if (o.model.empty()) yirage::fail("usage: yirage_tokenize MODEL [options] < input");
  return o;
}

void run(const Options& o) {
  const yirage::llm::GgufFile file = yirage::llm::GgufFile::open(o.model);
  const yirage::llm::Tokenizer tokenizer = yirage::llm::Tokenizer::from_gguf(file);
  if (o.decode && o.jsonl) {
    for (std::string line; std::getline(std::cin, line);) {
      const auto ids = nlohmann::json::parse(line).get<std::vector<yirage::llm::TokenId>>();
      for (const char c : tokenizer.decode(ids, o.render_special)) {
        std::cout << fmt::format("{:02x}", static_cast<uint8_t>(c));
      }
      std::cout << '\n';
    }
    return;
  }
  if (o.decode) {
    const auto ids = nlohmann::json::parse(std::cin).get<std::vector<yirage::llm::TokenId>>();
    std::cout << tokenizer.decode(ids, o.render_special);
    return;
  }
  if (o.jsonl) {
    for (std::string line; std::getline(std::cin, line);) {
      const std::string text = nlohmann::json::parse(line).get<std::string>();
      std::cout << nlohmann::json(tokenizer.encode(text, o.encode)).dump() << '\n';
    }
    return;
  }
  const std::string text(std::istreambuf_iterator<char>(std::cin), {});
  std::cout << nlohmann::json(tokenizer.encode(text, o.encode)).dump() << '\n';
}

}  // namespace

int main(int argc, char** argv) {
  try {
    run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
