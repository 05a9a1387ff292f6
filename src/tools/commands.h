// The `yirage` subcommands; each file adds one to the app and runs it from its callback.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "backend/backend.h"

namespace yirage::tools {

void add_backends_command(CLI::App& app);
void add_graph_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_suite_command(CLI::App& app);

// The backend for a --backend value: "auto" is the registry's first available backend. Throws
// for an unknown or unavailable backend, never substituting another.
backend::Backend& select_backend(const std::string& name);

// "reference (reference (host CPU), fingerprint 0123456789abcdef)"
std::string describe_backend(backend::Backend& backend);

}  // namespace yirage::tools
