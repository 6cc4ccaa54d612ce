// sam-traces: renders the GSM8K test (question -> reference answer) and HumanEval (prompt ->
// canonical solution) reference traces from a data directory, as JSONL {id, category, prompt,
// output} for sam-replay, bench-step and bench-batch. The prompts go through a corpora template.
//
//   sam-traces --data ../shared/data --out traces.jsonl --template raw
//   sam-traces --data ../shared/data --out traces.jsonl --template vicuna --limit 100
//
// Exit codes: 0 success, 1 runtime error (unreadable or malformed data, named by file, line and
// field), 2 usage error.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli.h"
#include "sam/corpora/error.h"
#include "sam/corpora/templates.h"
#include "sam/error.h"

namespace {

using nlohmann::json;
using sam::tools::UsageError;

// "a number", "an array", "null", ... for messages.
std::string Describe(const json& value) {
  if (value.is_null()) return "null";
  return std::string(value.is_array() || value.is_object() ? "an " : "a ") + value.type_name();
}

// The string field `field` of the JSON object `record`; throws sam::Error (kBadRecord) naming
// `where` (file and line) and the field when it is missing or not a string.
std::string StringField(const json& record, const char* field, const sam::ErrorContext& where) {
  sam::ErrorContext context = where;
  context.field = field;
  const auto it = record.find(field);
  if (it == record.end()) throw sam::Error(sam::ErrorCode::kBadRecord, context, "missing");
  if (!it->is_string())
    throw sam::Error(sam::ErrorCode::kBadRecord, context,
                     "is " + Describe(*it) + ", expected a string");
  return it->get<std::string>();
}

// Renders GSM8K test (question -> reference answer) and HumanEval (prompt ->
// canonical solution) traces.
int MakeTraces(const std::string& data_dir, const std::string& out_path,
               const std::string& template_name, size_t limit) {
  sam::corpora::Template templ;
  try {
    templ = sam::corpora::ParseTemplate(template_name);
  } catch (const sam::corpora::CorpusError& e) {
    throw UsageError(std::string("--template: ") + e.what());
  }
  const std::string gsm8k = data_dir + "/gsm8k/test.jsonl";
  const std::string humaneval = data_dir + "/humaneval/HumanEval.jsonl";
  sam::tools::CheckOutputPath("--out", out_path, {gsm8k, humaneval});
  // Written atomically: a bad --data or an interrupted run leaves no partial file.
  sam::tools::AtomicOutputFile file(out_path);
  std::ostream& out = file.stream();
  size_t written = 0;
  auto convert = [&](const std::string& file, const char* category, const char* prompt_field,
                     const char* output_field, const char* id_field) {
    std::ifstream in(file);
    if (!in) throw sam::Error(sam::ErrorCode::kIo, {.file = file}, "cannot open");
    std::string line;
    size_t n = 0;
    for (size_t line_no = 1; std::getline(in, line) && n < limit; ++line_no) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const sam::ErrorContext where{.file = file, .record = "line " + std::to_string(line_no)};
      json j;
      try {
        j = json::parse(line);
      } catch (const json::parse_error& e) {
        throw sam::Error(sam::ErrorCode::kInvalidJson, where, e.what());
      }
      if (!j.is_object())
        throw sam::Error(sam::ErrorCode::kBadRecord, where,
                         "is " + Describe(j) + ", expected an object");
      json t;
      // Any id will do (a number reads as its JSON text); a missing one is made up.
      t["id"] = !j.contains(id_field)     ? std::string(category) + "/" + std::to_string(line_no)
                : j[id_field].is_string() ? j[id_field].get<std::string>()
                                          : j[id_field].dump();
      t["category"] = category;
      t["prompt"] = sam::corpora::RenderPrompt(templ, StringField(j, prompt_field, where));
      t["output"] = StringField(j, output_field, where);
      out << t.dump() << "\n";
      ++n;
    }
    written += n;
  };
  convert(gsm8k, "gsm8k", "question", "answer", "id");
  convert(humaneval, "humaneval", "prompt", "canonical_solution", "task_id");
  file.Commit();
  std::fprintf(stderr, "sam-traces: wrote %zu traces to %s\n", written, out_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "sam-traces: render GSM8K test and HumanEval reference traces (JSONL {id, category,\n"
      "prompt, output}) for sam-replay, bench-step and bench-batch. The output is written\n"
      "atomically; an existing --out must be a regular file, not an input.\n"
      "Exit status: 0 success, 1 runtime error, 2 usage error.\n\n"
      "Examples:\n"
      "  sam-traces --data ../shared/data --out traces.jsonl --limit 100\n"
      "  sam-traces --data ../shared/data --out traces.jsonl --template vicuna\n",
      "sam-traces"};
  std::string data_dir, out_path, template_name = "raw";
  size_t limit = SIZE_MAX;
  app.add_option("--data", data_dir, "data directory (gsm8k/, humaneval/)")->required();
  app.add_option("--out", out_path, "output JSONL")->required();
  app.add_option("--template", template_name,
                 "prompt template: raw (the prompt and a newline, as documents put one before "
                 "the response; the figures of docs/performance.md) or vicuna")
      ->capture_default_str();
  app.add_option("--limit", limit, "at most this many traces per category (default: all)");
  sam::tools::SetUpTool("sam-traces");
  if (const auto status = sam::tools::ParseCommandLine(app, argc, argv)) return *status;
  return sam::tools::RunTool("sam-traces",
                             [&] { return MakeTraces(data_dir, out_path, template_name, limit); });
}
