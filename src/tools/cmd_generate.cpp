// `yirage generate`: runs a model (GGUF or safetensors) on a prompt and streams the continuation to
// stdout; the prefill and decode speeds go to stderr at the end.
#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "llm/llm.h"
#include "support/error.h"
#include "tools/commands.h"
#include "tools/llm_options.h"

namespace yirage::tools {
namespace {

struct GenerateCli {
  LlmCliOptions llm;
  std::string prompt;
  std::string save_json;
};

void write_json(const std::string& path, const llm::GenerateResult& r) {
  nlohmann::json j;
  j["prompt_ids"] = r.prompt_ids;
  j["ids"] = r.ids;
  j["text"] = r.text;
  j["first_logits"] = r.first_logits;
  j["prefill_tokens_per_second"] = r.stats.prefill_tokens_per_second();
  j["decode_tokens_per_second"] = r.stats.decode_tokens_per_second();
  std::ofstream out(path);
  if (!out) fail("{}: cannot open for writing", path);
  // Invalid UTF-8 cannot occur in `text` (StreamingDecoder), but replace rather than throw.
  out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  if (!out) fail("{}: write failed", path);
}

void run(const GenerateCli& cli) {
  llm::Llm model = open_llm(cli.llm);
  llm::GenerateOptions options = cli.llm.generate;
  llm::GenerateResult r = model.generate_detailed(cli.prompt, options, [](std::string_view s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  });
  std::fputc('\n', stdout);
  std::fflush(stdout);
  print_stats(r.stats);
  if (cli.llm.time_blocks) print_block_times(model.model());
  if (!cli.save_json.empty()) write_json(cli.save_json, r);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto cli = std::make_shared<GenerateCli>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text with a GGUF or safetensors model");
  add_llm_options(*cmd, cli->llm);
  cmd->add_option("--prompt,-p", cli->prompt, "Prompt text")->required();
  cmd->add_flag("--chat", cli->llm.generate.chat,
                "Wrap the prompt in the model's chat template as a user message");
  cmd->add_option("--save-json", cli->save_json,
                  "Write prompt ids, generated ids, text and first-step logits as JSON");
  cmd->callback([cli] { run(*cli); });
}

}  // namespace yirage::tools
