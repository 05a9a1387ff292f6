// triton.compile in a subprocess, and the on-disk cubin cache in front of it.
#include "backend/triton/aot.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include <unistd.h>

#include <fmt/format.h>

#include "backend/fingerprint.h"
#include "support/error.h"

namespace yirage::backend::triton {
namespace {

namespace fs = std::filesystem;

// Compiles the kernels that request.json lists, each from its own module file, writing
// <out>.cubin and <out>.json, or <out>.error with Triton's message in one line, and never
// stopping at one.
constexpr const char* kCompileScript = R"(import importlib.util, json, os, sys
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

request = json.load(open(sys.argv[1]))
folder = os.path.dirname(sys.argv[1])
for kernel in request["kernels"]:
    out = os.path.join(folder, kernel["out"])
    try:
        spec = importlib.util.spec_from_file_location(kernel["out"], os.path.join(folder, kernel["file"]))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        source = ASTSource(fn=getattr(module, kernel["name"]), signature=kernel["signature"], constexprs={})
        compiled = triton.compile(source, target=GPUTarget("cuda", request["arch"], 32),
                                  options={"num_warps": kernel["num_warps"]})
        with open(out + ".cubin", "wb") as f:
            f.write(compiled.asm["cubin"])
        m = compiled.metadata
        json.dump({"function": m.name, "threads": 32 * m.num_warps, "shared_bytes": m.shared,
                   "global_scratch_bytes": m.global_scratch_size,
                   "global_scratch_alignment": m.global_scratch_align,
                   "profile_scratch_bytes": m.profile_scratch_size}, open(out + ".json", "w"))
    except Exception as e:
        # One line: where Triton points ("at 2:18:"), then its message's last line.
        lines = [l for l in str(e).splitlines() if l.strip()] or [type(e).__name__]
        where = lines[0] + " " if len(lines) > 1 and lines[0].startswith("at ") else ""
        open(out + ".error", "w").write(f"{type(e).__name__}: {where}{lines[-1]}")
)";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) fail("triton: cannot write {}", path.string());
}

std::string quoted(const std::string& text) {
  std::string q = "'";
  for (char c : text) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

fs::path cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return fs::path(xdg) / "yirage" / "triton";
  if (const char* home = std::getenv("HOME"); home && *home)
    return fs::path(home) / ".cache" / "yirage" / "triton";
  return {};
}

// A fresh folder under the system's temporary one, removed with its scope.
class TempFolder {
 public:
  TempFolder() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / fmt::format("yirage-triton-{}-{:x}", getpid(), rd());
    fs::create_directories(path_);
  }
  ~TempFolder() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string pointer_type(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::f32: return "*fp32";
    case ir::DType::f16: return "*fp16";
    case ir::DType::bf16: return "*bf16";
    case ir::DType::i32: return "*i32";
    case ir::DType::i8: return "*i8";
    case ir::DType::u8: return "*u8";
  }
  return "*i8";
}

// The parameter names of a kernel in order, as the generator writes them: the text between the
// parentheses of its def line.
std::vector<std::string> parameters(const TritonKernel& k) {
  const size_t def = k.source.find("def " + k.name + "(");
  if (def == std::string::npos) fail("triton: {}: no def of {} in its source", k.what, k.name);
  const size_t open = def + 5 + k.name.size(), close = k.source.find(')', open);
  std::vector<std::string> names;
  std::string list = k.source.substr(open, close - open);
  for (size_t at = 0; at <= list.size();) {
    size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    std::string name = list.substr(at, comma - at);
    name.erase(0, name.find_first_not_of(' '));
    if (!name.empty()) names.push_back(name);
    at = comma + 1;
  }
  return names;
}

CompiledKernel parse_compiled(const std::vector<char>& cubin, const std::string& metadata,
                              const std::string& what) {
  CompiledKernel k;
  k.cubin = cubin;
  try {
    const nlohmann::json m = nlohmann::json::parse(metadata);
    k.function = m.at("function").get<std::string>();
    k.threads = m.at("threads").get<int>();
    k.shared_bytes = m.at("shared_bytes").get<size_t>();
    k.global_scratch_bytes = m.at("global_scratch_bytes").get<size_t>();
    k.global_scratch_alignment =
        std::max<size_t>(1, m.at("global_scratch_alignment").get<size_t>());
    k.profile_scratch_bytes = m.at("profile_scratch_bytes").get<size_t>();
  } catch (const nlohmann::json::exception& e) {
    fail("triton: {}: the compiled kernel's metadata does not parse: {}", what, e.what());
  }
  if (k.cubin.empty()) fail("triton: {}: Triton wrote an empty cubin", what);
  return k;
}

std::string cache_key(const TritonKernel& k, int arch, const std::string& version) {
  return fingerprint_of({k.source, std::to_string(arch), std::to_string(k.num_warps), version});
}

}  // namespace

std::string python_command() {
  const char* python = std::getenv("YIRAGE_PYTHON");
  return python && *python ? python : "python3";
}

std::string triton_version(std::string* why) {
  TempFolder folder;
  const fs::path out = folder.path() / "version";
  const std::string command = fmt::format(
      "{} -c 'import importlib.metadata as m, sys; "
      "sys.stdout.write(m.version(\"triton\"))' > {} 2>&1",
      quoted(python_command()), quoted(out.string()));
  const int status = std::system(command.c_str());
  std::string text = read_file(out);
  if (status == 0 && !text.empty()) return text;
  if (why) {
    const size_t last_line = text.find_last_of('\n', text.size() > 1 ? text.size() - 2 : 0);
    std::string message = last_line == std::string::npos ? text : text.substr(last_line + 1);
    while (!message.empty() && message.back() == '\n') message.pop_back();
    *why = fmt::format("{} finds no triton package ({}); pip install triton", python_command(),
                       message.empty() ? "no output" : message);
  }
  return {};
}

std::vector<CompiledKernel> compile_kernels(const Program& program, int arch) {
  std::string why;
  const std::string version = triton_version(&why);
  if (version.empty()) fail("triton: cannot compile kernels: {}", why);
  const fs::path cache = cache_dir();
  std::vector<CompiledKernel> compiled(program.kernels.size());
  std::vector<size_t> missing;
  for (size_t i = 0; i < program.kernels.size(); ++i) {
    const fs::path entry = cache / cache_key(program.kernels[i], arch, version);
    const std::string cubin = cache.empty() ? "" : read_file(entry.string() + ".cubin");
    const std::string metadata = cache.empty() ? "" : read_file(entry.string() + ".json");
    if (cubin.empty() || metadata.empty()) {
      missing.push_back(i);
      continue;
    }
    try {
      compiled[i] = parse_compiled({cubin.begin(), cubin.end()}, metadata, program.kernels[i].what);
    } catch (const Error&) {
      missing.push_back(i);  // a damaged entry is compiled again
    }
  }
  if (missing.empty()) return compiled;

  TempFolder folder;
  nlohmann::json request = {{"arch", arch}, {"kernels", nlohmann::json::array()}};
  for (size_t i : missing) {
    const TritonKernel& k = program.kernels[i];
    const std::vector<std::string> names = parameters(k);
    if (names.size() != k.args.size())
      fail("triton: {}: {} parameters for {} buffers", k.what, names.size(), k.args.size());
    nlohmann::json signature = nlohmann::json::object();
    for (size_t a = 0; a < names.size(); ++a)
      signature[names[a]] = pointer_type(program.slots[size_t(k.args[a])].type.dtype);
    const std::string out = fmt::format("k{}", i);
    write_file(folder.path() / (out + ".py"), k.source);
    request["kernels"].push_back({{"file", out + ".py"},
                                  {"name", k.name},
                                  {"signature", signature},
                                  {"num_warps", k.num_warps},
                                  {"out", out}});
  }
  write_file(folder.path() / "compile.py", kCompileScript);
  write_file(folder.path() / "request.json", request.dump());
  const fs::path log = folder.path() / "log";
  const std::string command =
      fmt::format("{} {} {} > {} 2>&1", quoted(python_command()),
                  quoted((folder.path() / "compile.py").string()),
                  quoted((folder.path() / "request.json").string()), quoted(log.string()));
  if (std::system(command.c_str()) != 0)
    fail("triton: the compiler process failed: {}", read_file(log));
  for (size_t i : missing) {
    const TritonKernel& k = program.kernels[i];
    const fs::path out = folder.path() / fmt::format("k{}", i);
    if (fs::exists(out.string() + ".error"))
      fail("triton: {} ({}) does not compile: {}", k.what, k.name,
           read_file(out.string() + ".error"));
    const std::string cubin = read_file(out.string() + ".cubin");
    const std::string metadata = read_file(out.string() + ".json");
    compiled[i] = parse_compiled({cubin.begin(), cubin.end()}, metadata, k.what);
    if (cache.empty()) continue;
    // Written under temporary names and renamed, so a reader never sees half a file; a cache
    // that cannot be written is skipped.
    std::error_code error;
    fs::create_directories(cache, error);
    const std::string entry = (cache / cache_key(k, arch, version)).string();
    for (const auto& [suffix, text] : {std::pair{".cubin", cubin}, {".json", metadata}}) {
      const std::string tmp = fmt::format("{}{}.{}.tmp", entry, suffix, getpid());
      std::ofstream(tmp, std::ios::binary) << text;
      fs::rename(tmp, entry + suffix, error);
      if (error) fs::remove(tmp, error);
    }
  }
  return compiled;
}

}  // namespace yirage::backend::triton
