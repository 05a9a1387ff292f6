// Hugging Face model directories: the tiny GGUF model written as config.json + safetensors +
// tokenizer.json computes the same logits and tokens as the GGUF file; config.json, weight and
// tokenizer problems are one-line errors naming the file and the key or tensor; sharded
// checkpoints load; and `yirage generate --model DIR` runs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "llm/llm.h"
#include "llm_hf_writer.h"
#include "llm_test_backend.h"
#include "llm_tiny_model.h"
#include "test_util.h"

namespace yirage::llm {
namespace {

namespace fs = std::filesystem;
using test_util::error_of;
using ::testing::HasSubstr;
using testing::kTinyPrompt;
using testing::TinyLlama;

// A fresh directory per test, removed afterwards.
class HfDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name =
        fmt::format("yirage_hf_{}_{}_{}", ::getpid(), test->test_suite_name(), test->name());
    std::replace(name.begin(), name.end(), '/', '_');  // parameterized tests' names hold '/'
    dir_ = fs::temp_directory_path() / name;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `m` as GGUF (kept in gguf_bytes_) and as a Hugging Face directory in dir_.
  const GgufFile& write_model(const TinyLlama& m) {
    gguf_bytes_ = testing::write_tiny_llama(m);
    gguf_ = std::make_unique<GgufFile>(GgufFile::from_memory(gguf_bytes_));
    testing::write_hf_dir(dir_, *gguf_);
    return *gguf_;
  }

  nlohmann::json read_json(const std::string& name) {
    std::ifstream in(dir_ / name);
    return nlohmann::json::parse(in);
  }
  void write_json(const std::string& name, const nlohmann::json& j) {
    testing::write_file(dir_ / name, j.dump());
  }
  std::string open_error() {
    const std::string e = error_of([&] { HfModelDir::open(dir_.string()); });
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    return e;
  }

  fs::path dir_;
  std::vector<std::byte> gguf_bytes_;
  std::unique_ptr<GgufFile> gguf_;
};

std::vector<float> all_logits(LlamaModel& model) {
  model.forward(kTinyPrompt, /*all_logits=*/true);
  return model.all_logits_rows();
}

struct SameLogitsCase {
  const char* name;
  uint32_t matrix_type;
  uint32_t embd_type;
  bool tied;
};

class SameLogits : public HfDir, public ::testing::WithParamInterface<SameLogitsCase> {};

// The same bytes in another layout: with Q and K rows permuted back, every product sums the same
// terms in the same order, so the logits agree bit for bit.
TEST_P(SameLogits, AsTheGgufFile) {
  TinyLlama m;
  m.matrix_type = GetParam().matrix_type;
  m.embd_type = GetParam().embd_type;
  m.tied = GetParam().tied;
  const GgufFile& gguf = write_model(m);
  LlamaModel from_gguf(
      gguf, ModelOptions{.threads = 2, .context_length = 64, .backend = testing::cpu_backend()});
  const HfModelDir dir = HfModelDir::open(dir_.string());
  LlamaModel from_hf(
      dir.config(), dir.weights(),
      ModelOptions{.threads = 2, .context_length = 64, .backend = testing::cpu_backend()});
  EXPECT_EQ(from_hf.config().tied_embeddings, m.tied);
  EXPECT_EQ(all_logits(from_hf), all_logits(from_gguf));
}

INSTANTIATE_TEST_SUITE_P(Types, SameLogits,
                         ::testing::Values(SameLogitsCase{"f32_untied", 0, 0, false},
                                           SameLogitsCase{"f16_tied", 1, 1, true},
                                           SameLogitsCase{"f16_f32_untied", 1, 0, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// Without the Q/K permutation RoPE would rotate the wrong pairs: the HF checkpoint differs from the
// GGUF one in those rows, yet both compute the same function.
TEST_F(HfDir, QAndKRowsAreStoredInRotateHalfOrder) {
  TinyLlama m;
  m.matrix_type = 0;
  m.embd_type = 0;
  const GgufFile& gguf = write_model(m);
  const HfCheckpoint ckpt = HfCheckpoint::open(dir_.string());
  const auto q = ckpt.get("model.layers.0.self_attn.q_proj.weight");
  const GgufTensor& gq = gguf.tensor("blk.0.attn_q.weight");
  ASSERT_EQ(q.tensor->data.size(), gq.data.size());
  EXPECT_FALSE(std::equal(gq.data.begin(), gq.data.end(), q.tensor->data.begin()));
  const auto v = ckpt.get("model.layers.0.self_attn.v_proj.weight");
  const GgufTensor& gv = gguf.tensor("blk.0.attn_v.weight");
  EXPECT_TRUE(std::equal(gv.data.begin(), gv.data.end(), v.tensor->data.begin()));
}

// BF16 matrices are kept as BF16 (the kernels read them in place); the result is checked against
// the plain reference forward pass on the same BF16 values.
TEST_F(HfDir, Bf16WeightsMatchTheReference) {
  TinyLlama m;
  m.matrix_type = 30;
  m.embd_type = 30;
  m.tied = false;
  const GgufFile& gguf = write_model(m);
  const auto want = testing::reference_logits(gguf, kTinyPrompt);
  const HfModelDir dir = HfModelDir::open(dir_.string());
  EXPECT_EQ(dir.checkpoint().get("model.layers.1.mlp.up_proj.weight").tensor->dtype,
            SafetensorsDtype::BF16);
  EXPECT_EQ(dir.weights().layers[1].up.type, GgmlType::BF16);
  LlamaModel model(
      dir.config(), dir.weights(),
      ModelOptions{.threads = 2, .context_length = 64, .backend = testing::cpu_backend()});
  const std::vector<float> got = all_logits(model);
  for (size_t t = 0; t < kTinyPrompt.size(); ++t) {
    double diff = 0, scale = 0;
    for (int i = 0; i < m.n_vocab; ++i) {
      diff = std::max(diff, std::abs(got[t * m.n_vocab + i] - want[t][i]));
      scale = std::max(scale, std::abs(want[t][i]));
    }
    EXPECT_LE(diff, 2e-3 * scale) << "position " << t;  // as for F32 GGUF weights
  }
}

TEST_F(HfDir, ShardedCheckpointLoadsLikeOneFile) {
  TinyLlama m;
  m.matrix_type = 0;
  m.embd_type = 0;
  const GgufFile& gguf = write_model(m);
  // Split model.safetensors into two shards and an index.
  const std::vector<testing::StTensor> tensors = testing::hf_tensors_from_gguf(gguf);
  const size_t half = tensors.size() / 2;
  const std::vector<testing::StTensor> first(tensors.begin(), tensors.begin() + half);
  const std::vector<testing::StTensor> second(tensors.begin() + half, tensors.end());
  nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                          {"weight_map", nlohmann::json::object()}};
  for (const auto& [shard, part] : {std::pair{"model-00001-of-00002.safetensors", &first},
                                    std::pair{"model-00002-of-00002.safetensors", &second}}) {
    testing::write_file(dir_ / shard, testing::write_safetensors(*part));
    for (const testing::StTensor& t : *part) index["weight_map"][t.name] = shard;
  }
  fs::remove(dir_ / "model.safetensors");
  write_json("model.safetensors.index.json", index);
  LlamaModel from_gguf(
      gguf, ModelOptions{.threads = 1, .context_length = 64, .backend = testing::cpu_backend()});
  const HfModelDir dir = HfModelDir::open(dir_.string());
  LlamaModel from_hf(
      dir.config(), dir.weights(),
      ModelOptions{.threads = 1, .context_length = 64, .backend = testing::cpu_backend()});
  EXPECT_EQ(all_logits(from_hf), all_logits(from_gguf));

  index["weight_map"]["model.norm.weight"] = "../model-00001-of-00002.safetensors";
  write_json("model.safetensors.index.json", index);
  EXPECT_THAT(open_error(), HasSubstr("model.safetensors.index.json: weight_map.model.norm.weight: "
                                      "'../model-00001-of-00002.safetensors' is not a file name"));
  index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
  index["weight_map"]["lm_head.weight"] = "model-00001-of-00002.safetensors";
  write_json("model.safetensors.index.json", index);
  EXPECT_THAT(open_error(), HasSubstr("weight_map.lm_head.weight: shard "
                                      "model-00001-of-00002.safetensors has no such tensor"));
  fs::remove(dir_ / "model.safetensors.index.json");
  EXPECT_THAT(open_error(), HasSubstr("no model.safetensors or model.safetensors.index.json"));
}

TEST_F(HfDir, ConfigErrorsNameTheKey) {
  write_model(TinyLlama{});
  const nlohmann::json good = read_json("config.json");
  const auto error_with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    write_json("config.json", j);
    return open_error();
  };
  EXPECT_THAT(error_with([](auto& j) { j.erase("hidden_size"); }),
              HasSubstr("config.json: hidden_size: missing"));
  EXPECT_THAT(error_with([](auto& j) { j["num_hidden_layers"] = "two"; }),
              HasSubstr("config.json: num_hidden_layers: expected an integer, found \"two\""));
  EXPECT_THAT(error_with([](auto& j) { j["intermediate_size"] = 0; }),
              HasSubstr("config.json: intermediate_size: 0 is out of range (1 to 1048576)"));
  EXPECT_THAT(error_with([](auto& j) { j["vocab_size"] = -5; }),
              HasSubstr("vocab_size: -5 is out of range"));
  EXPECT_THAT(error_with([](auto& j) { j["num_key_value_heads"] = 3; }),
              HasSubstr("num_attention_heads: 4 is not a multiple of num_key_value_heads 3"));
  EXPECT_THAT(error_with([](auto& j) { j["head_dim"] = 32; }),
              HasSubstr("head_dim: 32 differs from hidden_size / num_attention_heads = 16"));
  EXPECT_THAT(error_with([](auto& j) {
                j["rope_scaling"] = {{"rope_type", "llama3"}};
              }),
              HasSubstr("config.json: rope_scaling: rope scaling is not supported"));
  EXPECT_THAT(error_with([](auto& j) { j["rms_norm_eps"] = "small"; }),
              HasSubstr("rms_norm_eps: expected a number"));
  EXPECT_THAT(error_with([](auto& j) { j["tie_word_embeddings"] = 1; }),
              HasSubstr("tie_word_embeddings: expected true or false, found 1"));
  EXPECT_THAT(error_with([](auto& j) {
                j["architectures"] = {"MistralForCausalLM"};
                j["model_type"] = "mistral";
              }),
              HasSubstr("config.json: architectures: this engine runs LlamaForCausalLM"));
  EXPECT_THAT(error_with([](auto& j) { j["hidden_act"] = "gelu"; }),
              HasSubstr("hidden_act: 'gelu' is not supported"));
  testing::write_file(dir_ / "config.json", std::string_view("{\"hidden_size\": 64,"));
  EXPECT_THAT(open_error(), HasSubstr("config.json: offset 19: not valid JSON"));
  fs::remove(dir_ / "config.json");
  EXPECT_THAT(open_error(), HasSubstr("no config.json in the model directory"));
}

TEST_F(HfDir, WeightErrorsNameTheTensor) {
  TinyLlama m;
  m.matrix_type = 0;
  m.embd_type = 0;
  m.tied = false;
  const GgufFile& gguf = write_model(m);
  std::vector<testing::StTensor> tensors = testing::hf_tensors_from_gguf(gguf);
  const auto weights_error = [&](const std::function<void(std::vector<testing::StTensor>&)>& edit,
                                 const std::function<void(nlohmann::json&)>& config = {}) {
    std::vector<testing::StTensor> t = tensors;
    edit(t);
    testing::write_file(dir_ / "model.safetensors", testing::write_safetensors(t));
    if (config) {
      nlohmann::json j = read_json("config.json");
      config(j);
      write_json("config.json", j);
    }
    return error_of([&] { HfModelDir::open(dir_.string()).weights(); });
  };
  const auto find = [](std::vector<testing::StTensor> & t, const std::string& name) -> auto& {
    return *std::find_if(t.begin(), t.end(), [&](const auto& x) { return x.name == name; });
  };
  EXPECT_THAT(weights_error([&](auto& t) {
                find(t, "model.layers.1.mlp.up_proj.weight").shape = {64, 96};
              }),
              HasSubstr("tensor 'model.layers.1.mlp.up_proj.weight' has shape [64, 96], "
                        "expected [96, 64]"));
  EXPECT_THAT(weights_error([&](auto& t) {
                find(t, "model.layers.0.self_attn.o_proj.weight").dtype = "I32";
              }),
              HasSubstr("tensor 'model.layers.0.self_attn.o_proj.weight' has dtype I32; weights "
                        "must be F32, F16 or BF16"));
  EXPECT_THAT(weights_error([&](auto& t) { t.erase(t.begin() + 3); }),
              HasSubstr("no tensor named 'model.layers.0."));
  EXPECT_THAT(weights_error([&](auto& t) { t.pop_back(); }),
              HasSubstr("no tensor 'lm_head.weight', and config.json does not set "
                        "tie_word_embeddings"));
  EXPECT_THAT(
      weights_error([](auto&) {}, [](auto& j) { j["vocab_size"] = 300; }),
      HasSubstr("tensor 'model.embed_tokens.weight' has shape [265, 64], expected [300, 64]"));
}

TEST_F(HfDir, TokenizerMatchesTheGgufOne) {
  const GgufFile& gguf = write_model(TinyLlama{});
  const Tokenizer want = Tokenizer::from_gguf(gguf);
  const Tokenizer got = HfModelDir::open(dir_.string()).tokenizer();
  EXPECT_EQ(got.vocab_size(), want.vocab_size());
  EXPECT_EQ(got.bos_id(), want.bos_id());
  EXPECT_EQ(got.eos_id(), want.eos_id());
  EXPECT_EQ(got.adds_bos(), want.adds_bos());
  for (const char* text : {"hello world", " hello  hello\n\n 123 4567", "<|im_start|>user\nhello",
                           "caf\xC3\xA9 \xF0\x9F\x98\x80 don't", "   "}) {
    for (const bool parse_special : {false, true}) {
      const EncodeOptions o{true, parse_special};
      EXPECT_EQ(got.encode(text, o), want.encode(text, o)) << text;
    }
  }
  for (TokenId id = 0; id < static_cast<TokenId>(want.vocab_size()); ++id) {
    EXPECT_EQ(got.token_type(id), want.token_type(id)) << id;
    EXPECT_EQ(got.is_end_of_generation(id), want.is_end_of_generation(id)) << id;
  }
}

TEST_F(HfDir, TokenizerProblemsAreClearErrors) {
  write_model(TinyLlama{});
  const nlohmann::json good = read_json("tokenizer.json");
  const auto error_with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    write_json("tokenizer.json", j);
    const std::string e = error_of([&] { HfModelDir::open(dir_.string()).tokenizer(); });
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    return e;
  };
  EXPECT_THAT(error_with([](auto& j) { j["model"]["type"] = "Unigram"; }),
              HasSubstr("tokenizer.json: model.type: 'Unigram' is not supported (only byte-level "
                        "BPE is)"));
  EXPECT_THAT(error_with([](auto& j) {
                j["pre_tokenizer"] = {{"type", "Whitespace"}};
              }),
              HasSubstr("tokenizer.json: pre_tokenizer.type: not supported"));
  EXPECT_THAT(error_with([](auto& j) { j["model"]["vocab"]["Ġhello"] = 5000; }),
              HasSubstr("model.vocab.Ġhello: id 5000 is not below the model's vocab_size 265"));
  EXPECT_THAT(error_with([](auto& j) { j["model"]["vocab"]["zz"] = 7; }),
              HasSubstr(": id 7 is also token"));
  EXPECT_THAT(error_with([](auto& j) { j["model"]["merges"][2] = "nospace"; }),
              HasSubstr("model.merges[2]: not two parts separated by a space"));
  EXPECT_THAT(error_with([](auto& j) {
                j["normalizer"] = {{"type", "NFC"}};
              }),
              HasSubstr("normalizer: normalizers are not supported"));
  EXPECT_THAT(error_with([](auto& j) { j["added_tokens"][0]["id"] = 3; }),
              HasSubstr("added_tokens[0].id: 3 is already token"));
  // Merges may also be pairs, as newer tokenizers write them.
  const nlohmann::json pairs_version = [&] {
    nlohmann::json j = good;
    for (auto& merge : j["model"]["merges"]) {
      const std::string s = merge;
      merge = {s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)};
    }
    return j;
  }();
  write_json("tokenizer.json", pairs_version);
  const Tokenizer pairs = HfModelDir::open(dir_.string()).tokenizer();
  EXPECT_EQ(pairs.encode(" hello"), Tokenizer::from_gguf(*gguf_).encode(" hello"));
  fs::remove(dir_ / "tokenizer.json");
  EXPECT_THAT(error_of([&] { HfModelDir::open(dir_.string()).tokenizer(); }),
              HasSubstr("no tokenizer.json: a Hugging Face model directory needs one"));
}

// A TemplateProcessing post-processor adds BOS the way Hugging Face's fast tokenizers do.
TEST_F(HfDir, TemplatePostProcessorAddsBos) {
  write_model(TinyLlama{});
  nlohmann::json j = read_json("tokenizer.json");
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single",
                          {{{"SpecialToken", {{"id", "<|im_start|>"}, {"type_id", 0}}}},
                           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
  write_json("tokenizer.json", j);
  nlohmann::json tc = read_json("tokenizer_config.json");
  tc.erase("add_bos_token");
  write_json("tokenizer_config.json", tc);
  const Tokenizer t = HfModelDir::open(dir_.string()).tokenizer();
  EXPECT_TRUE(t.adds_bos());
  EXPECT_EQ(t.encode("hello").front(), 1);
}

TEST_F(HfDir, LlmGeneratesTheSameTokensAsFromGguf) {
  write_model(TinyLlama{.matrix_type = 1, .embd_type = 1});
  const fs::path gguf_path = dir_ / "tiny.gguf";
  testing::write_file(gguf_path, gguf_bytes_);
  GenerateOptions o;
  o.max_tokens = 8;
  o.stop_at_end_of_generation = false;
  Llm a =
      Llm::open(gguf_path.string(),
                LlmOptions{.threads = 2, .context_length = 64, .backend = testing::cpu_backend(2)});
  Llm b =
      Llm::open(dir_.string(),
                LlmOptions{.threads = 2, .context_length = 64, .backend = testing::cpu_backend(2)});
  const GenerateResult ra = a.generate_detailed("hello hello 12", o);
  const GenerateResult rb = b.generate_detailed("hello hello 12", o);
  EXPECT_EQ(rb.prompt_ids, ra.prompt_ids);
  EXPECT_EQ(rb.ids, ra.ids);
  EXPECT_EQ(rb.first_logits, ra.first_logits);
  // The chat template comes from tokenizer_config.json.
  const std::vector<ChatMessage> messages = {{"user", "hello"}};
  EXPECT_EQ(b.chat(messages, o), a.chat(messages, o));
}

TEST_F(HfDir, CliGeneratesFromADirectory) {
  write_model(TinyLlama{.matrix_type = 0, .embd_type = 0});
  const std::string command = std::string(YIRAGE_BINARY) + " generate --model " + dir_.string() +
                              " --prompt hello -n 4 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  std::array<char, 4096> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), pipe)) > 0;) output.append(buf.data(), n);
  EXPECT_EQ(pclose(pipe), 0) << output;
  EXPECT_THAT(output, HasSubstr("tokens/s"));
}

}  // namespace
}  // namespace yirage::llm
