// yirage.LLM: the inference engine (llm/engine.h) from Python.
//
// Generation runs without the GIL. Text is handed back token by token through the engine's
// on_text hook, which briefly takes the GIL to call the user's callback and to check for signals,
// so Ctrl-C stops a generation between tokens; the exception (KeyboardInterrupt, or whatever the
// callback raised) unwinds the engine as a C++ exception and is raised again in Python.
#include <optional>
#include <string>

#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "backend/backend.h"
#include "llm/fused_blocks.h"
#include "llm/llm.h"
#include "python/bindings.h"
#include "support/error.h"

namespace yirage::python {
namespace {

using namespace nb::literals;

// Carries a Python exception raised inside on_text out through the engine.
struct CallbackAborted {};

nb::dict stats_dict(const llm::GenerateStats& s) {
  nb::dict d;
  d["prompt_tokens"] = s.prompt_tokens;
  d["generated_tokens"] = s.generated_tokens;
  d["prefill_seconds"] = s.prefill_seconds;
  d["decode_seconds"] = s.decode_seconds;
  d["prefill_tokens_per_second"] = s.prefill_tokens_per_second();
  d["decode_tokens_per_second"] = s.decode_tokens_per_second();
  return d;
}

std::string generate(llm::Llm& model, const std::string& prompt, int max_tokens, float temperature,
                     int top_k, float top_p, float repeat_penalty, uint64_t seed, bool chat,
                     nb::handle on_text) {
  if (max_tokens < 0) fail("generate: max_tokens must be >= 0, got {}", max_tokens);
  if (!on_text.is_none() && !PyCallable_Check(on_text.ptr()))
    fail("generate: on_text must be a callable taking a str, or None");
  llm::GenerateOptions options;
  options.max_tokens = max_tokens;
  options.temperature = temperature;
  options.top_k = top_k;
  options.top_p = top_p;
  options.repeat_penalty = repeat_penalty;
  options.seed = seed;
  options.chat = chat;

  std::optional<nb::python_error> raised;
  auto hook = [&](std::string_view text) {
    nb::gil_scoped_acquire acquire;
    try {
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
      if (!on_text.is_none()) on_text(nb::str(text.data(), text.size()));
    } catch (nb::python_error& e) {
      raised.emplace(std::move(e));
      throw CallbackAborted{};
    }
  };
  std::string text;
  try {
    nb::gil_scoped_release release;
    text = model.generate(prompt, options, hook);
  } catch (const CallbackAborted&) {
    throw *raised;
  }
  return text;
}

}  // namespace

void bind_llm(nb::module_& m) {
  nb::class_<llm::Llm> cls(m, "LLM",
                           "A Llama-family model from a GGUF file or a Hugging Face directory, run "
                           "by YiRage's inference engine on the backend it names.");
  cls.def(
      "__init__",
      [](llm::Llm* self, const std::string& path, int threads, int context_length,
         bool fused_blocks, const std::string& backend_name, nb::handle progress,
         const std::string& attention) {
        if (!progress.is_none() && !PyCallable_Check(progress.ptr()))
          fail("LLM: progress must be a callable taking a str, or None");
        llm::LlmOptions options;
        options.threads = threads;
        options.context_length = context_length;
        options.fused_blocks = fused_blocks;
        options.attention_on_backend = llm::attention_placement(attention);
        options.backend = backend::create_backend(
            backend_name == "auto" ? backend::default_backend_name() : backend_name,
            {.threads = threads});
        std::optional<nb::python_error> raised;
        if (!progress.is_none())
          options.progress = [&](const std::string& line) {
            nb::gil_scoped_acquire acquire;
            try {
              progress(nb::str(line.data(), line.size()));
            } catch (nb::python_error& e) {
              raised.emplace(std::move(e));
              throw CallbackAborted{};
            }
          };
        try {
          nb::gil_scoped_release release;  // mapping, validating and optimizing take a moment
          new (self) llm::Llm(llm::Llm::open(path, options));
        } catch (const CallbackAborted&) {
          throw *raised;
        }
      },
      "path"_a, "threads"_a = 2, "context_length"_a = 0, "fused_blocks"_a = true,
      "backend"_a = "cpu", "progress"_a = nb::none(), "attention"_a = "auto",
      "Opens the GGUF model at path. threads: worker threads; context_length: tokens the KV\n"
      "cache holds (0: the model's training context, capped at 4096). Errors name the file.\n"
      "fused_blocks: run the hot blocks as superoptimized kernel graphs where the weights\n"
      "allow (the first load on a machine optimizes them, later loads find them in the\n"
      "tuning cache); backend: where they run, a name from get_available_backends() or\n"
      "\"auto\" (an unavailable one is an error with the reason; the default, cpu, is the one\n"
      "compared with llama.cpp); progress, when given, is called with one line per block graph;\n"
      "attention: where RoPE, the KV cache and attention run, \"host\" (the hand-written\n"
      "kernels), \"backend\" (a kernel graph there) or \"auto\" (the backend where its memory\n"
      "is not the host's).");
  cls.def_prop_ro(
      "hot_path", [](llm::Llm& model) { return model.model().hot_path(); },
      "Where the hot blocks run: the fused kernel graphs, or the hand-written kernels and why.");
  cls.def("generate", &generate, "prompt"_a, "max_tokens"_a = 128, "temperature"_a = 0.0f,
          "top_k"_a = 40, "top_p"_a = 0.95f, "repeat_penalty"_a = 1.0f, "seed"_a = 0,
          "chat"_a = false, "on_text"_a = nb::none(),
          "Continues prompt and returns the generated text (the stop token excluded).\n"
          "temperature 0 is greedy; top_k 0 and top_p 1 turn those filters off. chat=True wraps\n"
          "the prompt in the model's chat template as one user message. on_text, when given,\n"
          "is called with each piece of text as it becomes complete UTF-8. Each call starts\n"
          "from an empty KV cache. The GIL is released; Ctrl-C stops between tokens.");
  cls.def(
      "block_graphs",
      [](llm::Llm& model) {
        std::vector<std::pair<std::string, Graph>> graphs;
        for (llm::NamedGraph& g :
             llm::fused_block_graphs(model.model().config(), model.model().weights()))
          graphs.emplace_back(std::move(g.name),
                              Graph{std::make_shared<ir::KernelGraph>(std::move(g.graph))});
        return graphs;
      },
      "The kernel graphs of the model's hot blocks as (name, KernelGraph) pairs, in the order a\n"
      "load with fused_blocks=True optimizes them; superoptimizing one on a backend stores the\n"
      "cache entry that such a load then finds (yirage.ray.tune_graphs spreads them over Ray).");
  cls.def(
      "last_stats", [](const llm::Llm& model) { return stats_dict(model.last_stats()); },
      "Token counts and timings of the latest generate call.");
  cls.def(
      "tokenize",
      [](const llm::Llm& model, const std::string& text) { return model.tokenizer().encode(text); },
      "text"_a, "The model's token ids for text.");
  cls.def(
      "detokenize",
      [](const llm::Llm& model, const std::vector<llm::TokenId>& ids) {
        return model.tokenizer().decode(ids);
      },
      "ids"_a, "The text of token ids.");
}

}  // namespace yirage::python
