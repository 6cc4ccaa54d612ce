// sam-replay --report DIR: one self-contained HTML page (inline SVG charts, no
// scripts, no fetched resources) drawn from the JSON object sam-replay prints,
// so that every chart holds exactly the reported numbers.
//
//   sam::tools::CheckReportDir("report", {traces_path});   // before any work
//   ... replay, build `run` (the --json object) ...
//   std::string page = sam::tools::WriteReport("report", run, traces_path);
//
// Charts: MAT per policy and category; acceptance by draft depth; the budget
// curve (MAT against tokens verified per step, when --draft-sizes was given;
// else one point per policy); each source's share of steps and its MAT; a
// step-time histogram; plus a table of projected speed-ups with --cost-curve.
// Every mark carries its numbers as attributes (data-chart, data-policy,
// data-key, data-value, and data-x / data-mat where they apply) and a <title>
// tooltip, and the page is well-formed XML (XHTML), so tests can read both.
#ifndef SAM_TOOLS_REPLAY_REPORT_H_
#define SAM_TOOLS_REPLAY_REPORT_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sam::tools {

// The page's name inside the report directory.
inline constexpr const char* kReportPage = "index.html";

// Checks before any work that the report may be written to DIR/index.html:
// DIR is created later if missing (its parent must exist and be writable); an
// existing DIR must be a directory (not a symbolic link); files other than
// index.html are never touched, and an existing index.html is replaced only if
// sam-replay wrote it (its generator mark), never when it is one of `inputs`.
// Throws UsageError (exit 2) or sam::Error (kIo) naming the path.
void CheckReportDir(const std::string& dir, const std::vector<std::string>& inputs);

// The page for `run` (sam-replay's JSON object); `source` names the traces.
std::string RenderReport(const nlohmann::json& run, const std::string& source);

// Creates DIR if missing and writes the page atomically (a temporary file
// renamed over DIR/index.html). Returns the page's path.
std::string WriteReport(const std::string& dir, const nlohmann::json& run,
                        const std::string& source);

}  // namespace sam::tools

#endif  // SAM_TOOLS_REPLAY_REPORT_H_
