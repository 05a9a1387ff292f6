// The `yirage` command line, driven as a user drives it: through the built binary.
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "ir/ir.h"
#include "suite/suite.h"
#include "support/version.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const fs::path kExamples = fs::path(YIRAGE_SOURCE_DIR) / "examples";

std::string quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), std::streamsize(text.size()));
}

// A fresh directory, removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "yirage_cli_XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

struct CliResult {
  int exit_code;
  std::string out, err;
};

// Runs `yirage ARGS` (ARGS is shell text, quote paths) and captures both streams.
CliResult yirage(const std::string& args) {
  TempDir dir;
  std::string command = fmt::format("{} {} 2>{}", quote(YIRAGE_BINARY), args, quote(dir / "err"));
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed");
  CliResult result{-1, {}, {}};
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) result.out.append(buffer, n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.err = read_text(dir / "err");
  return result;
}

// The CLI's error contract: exit code 1 and one line "yirage: error: ..." on stderr.
void expect_one_line_error(const CliResult& result, std::string_view mentions) {
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_THAT(result.err, StartsWith("yirage: error: "));
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr(mentions));
}

// A C-order .npy v1.0 file, as np.save writes it.
std::string npy(std::string_view descr, const std::vector<int64_t>& shape, const void* data,
                size_t bytes, bool fortran = false) {
  std::string shape_text = shape.size() == 1 ? fmt::format("({},)", shape[0])
                                             : fmt::format("({})", fmt::join(shape, ", "));
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': {}, 'shape': {}, }}", descr,
                                   fortran ? "True" : "False", shape_text);
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  std::string file = "\x93NUMPY";
  file += {'\x01', '\x00', char(header.size() & 0xff), char(header.size() >> 8)};
  return file + header + std::string(static_cast<const char*>(data), bytes);
}

std::string npy_f32(const std::vector<int64_t>& shape, const std::vector<float>& values) {
  return npy("<f4", shape, values.data(), values.size() * sizeof(float));
}

// The descr and the elements of an .npy file the CLI wrote.
std::pair<std::string, std::string> parse_npy(const std::string& file) {
  size_t header_length = size_t(uint8_t(file.at(8))) | size_t(uint8_t(file.at(9))) << 8;
  std::string header = file.substr(10, header_length);
  size_t at = header.find("'descr': '") + 10;
  return {header.substr(at, header.find('\'', at) - at), file.substr(10 + header_length)};
}

std::string one_input_graph(std::string_view dtype, std::string_view shape) {
  return fmt::format(
      R"({{"schema": "yirage.kernel_graph", "version": 1,
 "nodes": [{{"name": "x", "op": "input", "dtype": "{}", "shape": {}}},
           {{"name": "y", "op": "exp", "inputs": ["x"]}}],
 "outputs": [{{"tensor": "y", "name": "y"}}]}})",
      dtype, shape);
}

std::vector<std::string> example_names() {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(kExamples))
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Cli, PrintsVersion) {
  CliResult result = yirage("--version");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.out, fmt::format("yirage {}\n", yirage::kVersion));
}

TEST(Cli, BackendsJsonListsEveryBackendHonestly) {
  CliResult result = yirage("backends --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  nlohmann::json list = nlohmann::json::parse(result.out);
  ASSERT_TRUE(list.is_array());
  ASSERT_EQ(list.size(), 5u);
  EXPECT_EQ(list[0]["name"], "cuda");
  EXPECT_EQ(list[1]["name"], "cpu");
  EXPECT_EQ(list[2]["name"], "opencl");
  EXPECT_EQ(list[3]["name"], "triton");
  EXPECT_EQ(list[4]["name"], "reference");

  const nlohmann::json &cuda = list[0], &cpu = list[1], &opencl = list[2], &triton = list[3],
                       &reference = list[4];
  EXPECT_EQ(opencl["available"], opencl["reason"].get<std::string>().empty());
  EXPECT_TRUE(opencl["device"]["capabilities"].is_object());
  EXPECT_EQ(reference["available"], true);
  EXPECT_EQ(reference["device"]["name"], "reference (host CPU)");
  EXPECT_EQ(cpu["available"], cpu["reason"].get<std::string>().empty());
  EXPECT_THAT(cpu["device"]["fingerprint"].get<std::string>(),
              ::testing::MatchesRegex("[0-9a-f]{16}"));
  EXPECT_TRUE(cpu["device"]["capabilities"].contains("vector_bits"));
  EXPECT_EQ(cuda["available"], cuda["reason"].get<std::string>().empty());
  EXPECT_TRUE(cuda["device"]["capabilities"].is_object());
  // Available only with a CUDA device and the triton package; else one line saying which lacks.
  const std::string why_not = triton["reason"].get<std::string>();
  EXPECT_EQ(triton["available"], why_not.empty());
  EXPECT_EQ(why_not.find('\n'), std::string::npos) << why_not;
  if (cuda["device"]["name"] == "no CUDA device") {
    EXPECT_THAT(why_not, HasSubstr("no CUDA device")) << why_not;
  }
}

TEST(Cli, BackendsTableShowsReasons) {
  CliResult result = yirage("backends");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, ::testing::ContainsRegex("\nreference +yes +reference \\(host CPU\\)"));
  for (const yirage::backend::BackendInfo& info : yirage::backend::describe_backends()) {
    if (info.availability.available) {
      EXPECT_THAT(result.out, ::testing::ContainsRegex("\n" + info.name + " +yes "));
    } else {
      EXPECT_THAT(result.out, ::testing::ContainsRegex("\n" + info.name + " +no "));
      EXPECT_THAT(result.out, HasSubstr("reason: " + info.availability.reason));
    }
  }
}

TEST(Cli, GraphShowListsNodesInputsOutputsAndHash) {
  std::string file = (kExamples / "llama_mlp_block.json").string();
  CliResult result = yirage("graph show " + quote(file));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  yirage::ir::KernelGraph graph = yirage::ir::load_kernel_graph(file);
  EXPECT_THAT(result.out, HasSubstr("structural hash: " + yirage::ir::structural_hash_hex(graph)));
  EXPECT_THAT(result.out, HasSubstr("inputs: X f32[1, 4096], G f32[4096], Wgu f32[4096, 28672], "
                                    "Wd f32[14336, 4096]\n"));
  EXPECT_THAT(result.out, HasSubstr("  normed = rms_norm(normalized_shape=[4096], eps=1e-06, "
                                    "weight)(X, G) : f32[1, 4096]\n"));
  EXPECT_THAT(result.out, HasSubstr("  split = split(dim=1, sizes=[14336, 14336])(gate_up) : "
                                    "f32[1, 14336], f32[1, 14336]\n"));
  EXPECT_THAT(result.out, HasSubstr("  hidden = mul(gate, split:1) : f32[1, 14336]\n"));
  EXPECT_THAT(result.out, HasSubstr("outputs:\n  out = out : f32[1, 4096]\n"));
}

TEST(Cli, GraphShowWritesDotAndSvg) {
  TempDir dir;
  std::string file = (kExamples / "lora.json").string();
  CliResult result = yirage(fmt::format("graph show {} --dot {} --svg {}", quote(file),
                                        quote(dir / "g.dot"), quote(dir / "g.svg")));
  EXPECT_EQ(read_text(dir / "g.dot"), yirage::ir::to_dot(yirage::ir::load_kernel_graph(file)));
  if (std::system("command -v dot >/dev/null 2>&1") != 0) {
    // Without graphviz the SVG cannot be made, and the CLI must say so rather than crash.
    EXPECT_EQ(result.exit_code, 1);
    EXPECT_THAT(result.err, HasSubstr("graphviz 'dot' not found"));
    return;
  }
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(read_text(dir / "g.svg"), HasSubstr("<svg"));
}

TEST(Cli, SuiteRunInF16StaysFinite) {
  // Unscaled inputs make exp(Q@K) overflow f16; the suite scales them as the peers do.
  CliResult result = yirage("suite run gqa lora --dtype f16 --backend reference --no-tune");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::istringstream lines(result.out);
  int workload_lines = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("gqa ", 0) != 0 && line.rfind("lora ", 0) != 0) continue;
    ++workload_lines;
    EXPECT_THAT(line, HasSubstr("nan    0"));
  }
  EXPECT_EQ(workload_lines, 2) << result.out;
}

TEST(Cli, ExamplesAreTheSuiteAsExportedNow) {
  TempDir dir;
  CliResult result = yirage("suite export " + quote(dir.path().string()));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::vector<std::string> workloads;
  for (const yirage::suite::WorkloadInfo& w : yirage::suite::workloads())
    workloads.push_back(w.name);
  std::sort(workloads.begin(), workloads.end());
  ASSERT_EQ(example_names(), workloads);
  for (const std::string& name : workloads)
    EXPECT_TRUE(read_text(kExamples / (name + ".json")) == read_text(dir / (name + ".json")))
        << "examples/" << name << ".json is stale: rerun `yirage suite export examples`";
}

class CliExample : public ::testing::TestWithParam<std::string> {};

TEST_P(CliExample, RunsWithoutNaNOrInf) {
  std::string file = (kExamples / (GetParam() + ".json")).string();
  CliResult result = yirage("run " + quote(file));
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  yirage::ir::KernelGraph graph = yirage::ir::load_kernel_graph(file);
  EXPECT_THAT(result.out, StartsWith("backend: "));
  EXPECT_THAT(result.out, HasSubstr("inputs: random, seed 0\n"));
  EXPECT_THAT(result.out, HasSubstr(fmt::format(
                              "out: {}\n", format_type(graph.type(graph.outputs()[0].tensor)))));
  EXPECT_THAT(result.out, HasSubstr("nan 0  inf 0\n"));
}

INSTANTIATE_TEST_SUITE_P(Examples, CliExample, ::testing::ValuesIn(example_names()),
                         [](const auto& info) { return info.param; });

TEST(Cli, MalformedJsonIsAOneLineErrorNamingTheFile) {
  TempDir dir;
  write_text(dir / "broken.json", "{\"schema\": \"yirage.kernel_graph\", \"nodes\": [");
  expect_one_line_error(yirage("run " + quote(dir / "broken.json")), dir / "broken.json");
  expect_one_line_error(yirage("graph show " + quote(dir / "broken.json")), dir / "broken.json");
}

TEST(Cli, MissingFileIsAOneLineErrorNamingTheFile) {
  TempDir dir;
  expect_one_line_error(yirage("run " + quote(dir / "absent.json")), dir / "absent.json");
  expect_one_line_error(yirage("graph show " + quote(dir / "absent.json")), dir / "absent.json");
}

TEST(Cli, BackendErrorsAreOneLine) {
  std::string file = quote((kExamples / "ntrans.json").string());
  expect_one_line_error(
      yirage("run " + file + " --backend nope"),
      "unknown backend 'nope'; known backends: cuda, cpu, opencl, triton, reference");
  for (const yirage::backend::BackendInfo& info : yirage::backend::describe_backends())
    if (!info.availability.available)
      expect_one_line_error(yirage("run " + file + " --backend " + info.name),
                            fmt::format("backend '{}' is unavailable: ", info.name));
}

// The LLM's commands take the same names, and refuse an unavailable backend (cuda on a machine
// without a GPU) with its reason before the model loads: never a run on another backend.
TEST(Cli, AnLlmOnAnUnavailableBackendIsAOneLineError) {
  const std::string model = quote((kExamples / "ntrans.json").string());
  for (const char* command : {"generate --prompt hi", "chat"})
    expect_one_line_error(yirage(fmt::format("{} --model {} --backend nope", command, model)),
                          "unknown backend 'nope'");
  for (const yirage::backend::BackendInfo& info : yirage::backend::describe_backends())
    if (!info.availability.available)
      for (const char* command : {"generate --prompt hi", "chat"})
        expect_one_line_error(
            yirage(fmt::format("{} --model {} --backend {}", command, model, info.name)),
            fmt::format("backend '{}' is unavailable: ", info.name));
}

// Without OpenBLAS the cpu backend says why, and a library matmul is an error, never generated
// code in its place.
TEST(Cli, ALibraryMatmulWithoutTheLibraryIsAOneLineError) {
  TempDir dir;
  write_text(dir / "lib.json", R"({"schema": "yirage.kernel_graph", "version": 1,
 "nodes": [{"name": "x", "op": "input", "dtype": "f32", "shape": [4, 8]},
           {"name": "w", "op": "input", "dtype": "f32", "shape": [8, 4]},
           {"name": "y", "op": "matmul", "inputs": ["x", "w"], "library": true}],
 "outputs": [{"tensor": "y", "name": "y"}]})");
  setenv("YIRAGE_CPU_OPENBLAS", "off", 1);
  const CliResult backends = yirage("backends --json");
  const CliResult run = yirage("run " + quote(dir / "lib.json") + " --backend cpu --no-cache");
  unsetenv("YIRAGE_CPU_OPENBLAS");
  ASSERT_EQ(backends.exit_code, 0) << backends.err;
  const nlohmann::json cpu = nlohmann::json::parse(backends.out)[1];
  if (cpu["available"] != true) GTEST_SKIP() << "the cpu backend is unavailable";
  EXPECT_EQ(cpu["device"]["capabilities"]["library_matmul"],
            nlohmann::json({{"unavailable", "turned off by YIRAGE_CPU_OPENBLAS=off"}}));
  expect_one_line_error(run,
                        "cpu backend: node 'y' is a library matmul, but no BLAS library is "
                        "available: turned off by YIRAGE_CPU_OPENBLAS=off");
}

TEST(Cli, ParseErrorsKeepCli11ExitCodes) {
  CliResult result = yirage("run");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr("file"));
}

TEST(Cli, SuiteRunWithoutTuningPrintsOneLinePerWorkload) {
  CliResult result = yirage("suite run ntrans lora --backend reference --no-tune --seed 3");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out,
              ::testing::ContainsRegex("\nntrans +f32\\[8, 4096\\] +mean .* nan +0 .* ms\n"));
  EXPECT_THAT(result.out,
              ::testing::ContainsRegex("\nlora +f32\\[16, 4096\\] +mean .* nan +0 .* ms\n"));
}

TEST(Cli, SuiteRunBadInputIsAOneLineError) {
  expect_one_line_error(yirage("suite run nope"), "unknown workload 'nope'");
  expect_one_line_error(yirage("suite run ntrans --search-seconds 0"),
                        "--search-seconds must be a positive number");
  expect_one_line_error(yirage("suite run ntrans --no-tune --json"), "do not go with --no-tune");
}

bool cpu_backend_available() {
  for (const yirage::backend::BackendInfo& info : yirage::backend::describe_backends())
    if (info.name == "cpu") return info.availability.available;
  return false;
}

// The main job's core: each workload is tuned by tune::optimize, and the report names the winner
// and its profiled time; a second run on the same cache answers from it and times the winner again.
TEST(Cli, SuiteRunTunesThenAnswersFromTheCache) {
  if (!cpu_backend_available()) GTEST_SKIP() << "the cpu backend is unavailable here";
  TempDir dir;
  const std::string command =
      "suite run ntrans --backend cpu --json --search-seconds 5 --cache " + quote(dir / "t.sqlite");
  const CliResult first = yirage(command);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const nlohmann::json tuned = nlohmann::json::parse(first.out);  // one object: one workload
  EXPECT_EQ(tuned["workload"], "ntrans");
  EXPECT_FALSE(tuned["cache_hit"].get<bool>());
  EXPECT_GT(tuned["steady_seconds"].get<double>(), 0);
  // On a miss the steady-state time is the tuner's own measurement of its winner.
  EXPECT_EQ(tuned["steady_seconds"], tuned["tuned_seconds"]);
  EXPECT_GE(tuned["kernels"].get<int>(), 1);
  const auto& candidates = tuned["candidates"];
  EXPECT_TRUE(std::any_of(candidates.begin(), candidates.end(), [&](const nlohmann::json& c) {
    return c["label"] == tuned["label"] && c["status"] == "ok" &&
           c["seconds"] == tuned["steady_seconds"];
  })) << first.out;
  EXPECT_THAT(first.err, HasSubstr("[1/1] ntrans: searching"));
  EXPECT_THAT(first.err, HasSubstr("profiling"));

  const CliResult second = yirage(command);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const nlohmann::json cached = nlohmann::json::parse(second.out);
  EXPECT_TRUE(cached["cache_hit"].get<bool>());
  EXPECT_EQ(cached["entry"], tuned["entry"]);
  EXPECT_EQ(cached["label"], tuned["label"]);
  EXPECT_EQ(cached["tuned_seconds"], tuned["tuned_seconds"]);
  EXPECT_GT(cached["steady_seconds"].get<double>(), 0);
  EXPECT_THAT(second.err, HasSubstr("cache hit"));
  EXPECT_THAT(second.err, ::testing::Not(HasSubstr("searching")));
}

TEST(Cli, SuiteListShowsEveryProgram) {
  CliResult result = yirage("suite list");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (const yirage::suite::WorkloadInfo& w : yirage::suite::workloads()) {
    EXPECT_THAT(result.out, HasSubstr(w.name));
    EXPECT_THAT(result.out, HasSubstr(w.program));
  }
}

class CliNpy : public ::testing::Test {
 protected:
  // Writes graph.json with one input x of `dtype` and `shape`, and x.npy with `file`.
  CliResult run_with(std::string_view dtype, std::string_view shape, const std::string& file) {
    write_text(dir_ / "graph.json", one_input_graph(dtype, shape));
    fs::create_directories(dir_ / "in");
    write_text(input_path(), file);
    return yirage(fmt::format("run {} --inputs {} --save {}", quote(dir_ / "graph.json"),
                              quote(dir_ / "in"), quote(dir_ / "out")));
  }
  std::string input_path() const { return (dir_.path() / "in" / "x.npy").string(); }
  std::string saved() const { return read_text(dir_.path() / "out" / "y.npy"); }

  TempDir dir_;
};

TEST_F(CliNpy, WrongShapeNamesFileExpectedAndGot) {
  CliResult result = run_with("f32", "[2, 3]", npy_f32({3, 2}, std::vector<float>(6, 0.5f)));
  expect_one_line_error(result, input_path());
  EXPECT_THAT(result.err, HasSubstr("shape [3, 2] does not match input 'x' of type f32[2, 3]"));
}

TEST_F(CliNpy, F32RoundTripsThroughSave) {
  std::vector<float> x = {0.0f, 1.0f, -1.0f, 0.5f, 2.0f, -3.0f};
  CliResult result = run_with("f32", "[2, 3]", npy_f32({2, 3}, x));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto [descr, data] = parse_npy(saved());
  EXPECT_EQ(descr, "<f4");
  ASSERT_EQ(data.size(), 6 * sizeof(float));
  for (size_t i = 0; i < x.size(); ++i) {
    float y;
    std::memcpy(&y, data.data() + i * sizeof(float), sizeof(float));
    EXPECT_FLOAT_EQ(y, std::exp(x[i]));
  }
}

TEST_F(CliNpy, Bf16TakesExactFloat32AndSavesWidened) {
  CliResult result = run_with("bf16", "[4]", npy_f32({4}, {1.0f, -2.5f, 0.125f, 0.0f}));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto [descr, data] = parse_npy(saved());
  EXPECT_EQ(descr, "<f4");
  ASSERT_EQ(data.size(), 16u);
  for (size_t i = 0; i < 4; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data.data() + i * 4, 4);
    EXPECT_EQ(bits & 0xffffu, 0u) << "element " << i << " is not a bf16";
  }
}

TEST_F(CliNpy, Bf16RejectsInexactValuesByIndex) {
  CliResult result = run_with("bf16", "[3]", npy_f32({3}, {1.0f, 2.0f, 0.1f}));
  expect_one_line_error(result, input_path());
  EXPECT_THAT(result.err, HasSubstr("element 2 (0.1) is not exactly representable in bf16"));
}

TEST_F(CliNpy, F16TakesHalfFloatsAndSavesThem) {
  const uint16_t halves[] = {0x3c00, 0xc000};  // 1.0, -2.0
  CliResult result = run_with("f16", "[2]", npy("<f2", {2}, halves, sizeof(halves)));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto [descr, data] = parse_npy(saved());
  EXPECT_EQ(descr, "<f2");
  EXPECT_EQ(data.size(), 4u);
}

TEST_F(CliNpy, I32TakesInt64ThatFitsOnly) {
  write_text(dir_ / "graph.json", R"({"schema": "yirage.kernel_graph", "version": 1,
 "nodes": [{"name": "table", "op": "input", "dtype": "f32", "shape": [4, 2]},
           {"name": "x", "op": "input", "dtype": "i32", "shape": [2]},
           {"name": "y", "op": "embedding", "inputs": ["table", "x"]}],
 "outputs": [{"tensor": "y", "name": "y"}]})");
  fs::create_directories(dir_ / "in");
  write_text(dir_ / "in/table.npy", npy_f32({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}));
  std::string command = fmt::format("run {} --inputs {} --save {}", quote(dir_ / "graph.json"),
                                    quote(dir_ / "in"), quote(dir_ / "out"));
  const int64_t ids[] = {3, 1};
  write_text(input_path(), npy("<i8", {2}, ids, sizeof(ids)));
  CliResult result = yirage(command);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto [descr, data] = parse_npy(saved());
  std::vector<float> rows(4);
  std::memcpy(rows.data(), data.data(), 16);
  EXPECT_EQ(rows, (std::vector<float>{6, 7, 2, 3}));

  const int64_t too_big[] = {1, int64_t(1) << 40};
  write_text(input_path(), npy("<i8", {2}, too_big, sizeof(too_big)));
  expect_one_line_error(yirage(command), "element 1 (1099511627776) does not fit in i32");
}

TEST_F(CliNpy, RejectsFortranOrderTruncationAndGarbage) {
  std::vector<float> values(6, 1.0f);
  CliResult fortran = run_with("f32", "[2, 3]", npy("<f4", {2, 3}, values.data(), 24, true));
  expect_one_line_error(fortran, "Fortran-order arrays are not supported");

  std::string whole = npy_f32({2, 3}, values);
  CliResult truncated = run_with("f32", "[2, 3]", whole.substr(0, whole.size() - 5));
  size_t data_offset = whole.size() - 24;
  expect_one_line_error(truncated,
                        fmt::format("{}: byte {}: truncated", input_path(), data_offset));

  // An empty array whose other dims multiply past the element limit (found by npy_fuzz).
  CliResult huge = run_with("f32", "[2, 3]", npy("<f4", {1419103232, 8000000000, 0}, nullptr, 0));
  expect_one_line_error(huge, "has more than 1099511627776 elements");

  CliResult garbage = run_with("f32", "[2, 3]", "not numpy at all");
  expect_one_line_error(garbage, fmt::format("{}: byte 0: not an .npy file", input_path()));
}

TEST_F(CliNpy, MissingInputFileIsNamed) {
  write_text(dir_ / "graph.json", one_input_graph("f32", "[2]"));
  fs::create_directories(dir_ / "in");
  expect_one_line_error(
      yirage(fmt::format("run {} --inputs {}", quote(dir_ / "graph.json"), quote(dir_ / "in"))),
      "input 'x': " + input_path() + " does not exist");
}

// ---- yirage verify: a µGraph a user wrote against its kernel graph ------------------------------

const fs::path kData = fs::path(YIRAGE_SOURCE_DIR) / "tests" / "data";

std::string verify_args(const fs::path& graph, const fs::path& mugraph) {
  return fmt::format("verify {} {}", quote(graph.string()), quote(mugraph.string()));
}

TEST(CliVerify, ACorrectMuGraphIsVerifiedWithItsBoundAssumptionsAndFloatChecks) {
  const CliResult r = yirage(verify_args(kData / "graph.json", kData / "mugraph.json"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("verified: yes\n"));
  EXPECT_THAT(r.out, HasSubstr("trials: "));
  EXPECT_THAT(r.out, HasSubstr("bound: P[false accept] <= "));
  EXPECT_THAT(r.out, HasSubstr("assumes: the two programs' difference"));
  for (const char* d : {"uniform", "large", "outliers", "near_overflow"})
    EXPECT_THAT(r.out, HasSubstr(fmt::format("float check, inputs {}: max error ", d)));

  const CliResult j = yirage(verify_args(kData / "graph.json", kData / "mugraph.json") + " --json");
  ASSERT_EQ(j.exit_code, 0) << j.out << j.err;
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  EXPECT_TRUE(doc["verified"].get<bool>());
  EXPECT_GE(doc["trials"].get<int>(), 2);
  EXPECT_LE(doc["false_accept_bound"].get<double>(), 1e-9);
  EXPECT_FALSE(doc["assumptions"].empty());
  ASSERT_EQ(doc["float_checks"].size(), 4u);
  for (const nlohmann::json& check : doc["float_checks"]) {
    EXPECT_TRUE(check["passed"].get<bool>()) << check.dump();
    EXPECT_GT(check["tolerance"].get<double>(), 0) << check.dump();
    EXPECT_TRUE(check["input_graph_error_from_f32"].is_null()) << "f32 graphs are not widened";
  }
}

TEST(CliVerify, AWrongMuGraphGetsAOneLineReasonAndFails) {
  // mugraph_wrong.json multiplies by the rms where mugraph.json divides.
  const CliResult r = yirage(verify_args(kData / "graph.json", kData / "mugraph_wrong.json"));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("verified: no\n"));
  EXPECT_EQ(r.err,
            "yirage: verify: not equivalent: output 0 ('out') differs at [0, 0] in trial 0\n");

  const CliResult j =
      yirage(verify_args(kData / "graph.json", kData / "mugraph_wrong.json") + " --json");
  EXPECT_EQ(j.exit_code, 1);
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  EXPECT_FALSE(doc["verified"].get<bool>());
  EXPECT_EQ(doc["mismatch"]["name"], "out");
}

TEST(CliVerify, MalformedJsonIsAOneLineErrorNamingTheFile) {
  TempDir dir;
  write_text(dir / "broken.json", "{\"schema\": \"yirage.kernel_graph\", \"nodes\": [");
  expect_one_line_error(yirage(verify_args(kData / "graph.json", dir / "broken.json")),
                        dir / "broken.json");
  expect_one_line_error(yirage(verify_args(dir / "broken.json", kData / "mugraph.json")),
                        dir / "broken.json");
}

TEST(CliVerify, AnInvalidBlockGraphNamesTheNode) {
  TempDir dir;
  std::string text = read_text(kData / "mugraph.json");
  const std::string matmul = "{\"op\": \"matmul\", \"inputs\": [0, 3]";
  ASSERT_NE(text.find(matmul), std::string::npos);
  text.replace(text.find(matmul), matmul.size(), "{\"op\": \"matmul\", \"inputs\": [3, 0]");
  write_text(dir / "swapped.json", text);
  const CliResult r = yirage(verify_args(kData / "graph.json", dir / "swapped.json"));
  expect_one_line_error(r, "block node 4: matmul");
}

TEST(CliVerify, MismatchedInputsAreAOneLineErrorNamingTheInput) {
  // examples/rmsnorm_linear.json is the same program at model sizes.
  const CliResult r =
      yirage(verify_args(kExamples / "rmsnorm_linear.json", kData / "mugraph.json"));
  expect_one_line_error(r, "input 0 is f32[2, 4096] ('X') in the first program but f32[4, 32]");
}

}  // namespace
