// `yirage chat`: an interactive conversation with a chat model. Each line read from stdin is a user
// message; the reply streams to stdout. The KV cache keeps the conversation, so each turn only
// processes its new tokens. "/reset" starts over; "/exit" or end of input ends.
#include <cstdio>
#include <iostream>
#include <vector>

#include <fmt/format.h>

#include "llm/llm.h"
#include "tools/commands.h"
#include "tools/llm_options.h"

namespace yirage::tools {
namespace {

struct ChatCli {
  LlmCliOptions llm;
  std::string system;
  bool stats = false;
};

void run(const ChatCli& cli) {
  llm::Llm model = open_llm(cli.llm);
  std::vector<llm::ChatMessage> messages;
  auto reset = [&] {
    messages.clear();
    if (!cli.system.empty()) messages.push_back({"system", cli.system});
  };
  reset();
  std::string line;
  for (;;) {
    fmt::print(stderr, "> ");
    std::fflush(stderr);
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      reset();
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({"user", line});
    std::string reply = model.chat(messages, cli.llm.generate, [](std::string_view s) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    });
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (cli.stats) print_stats(model.last_stats());
    messages.push_back({"assistant", reply});
  }
  if (cli.llm.time_blocks) print_block_times(model.model());  // the whole session's
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto cli = std::make_shared<ChatCli>();
  cli->llm.generate.max_tokens = 512;
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a GGUF or safetensors model interactively");
  add_llm_options(*cmd, cli->llm);
  cmd->add_option("--system", cli->system,
                  "System message (default: the chat template's own, if it has one)");
  cmd->add_flag("--stats", cli->stats, "Print prefill and decode speed after each reply");
  cmd->callback([cli] { run(*cli); });
}

}  // namespace yirage::tools
