#include "sam/corpora/presets.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <system_error>

namespace sam::corpora {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPython18kHint =
    "python18k/train.parquet is there but was not converted to JSONL: rerun corpora/fetch.sh "
    "with python3 and pyarrow or pandas, or convert it by hand (one JSON object per line)";

constexpr std::array<PresetEntry, 5> kDefault = {{
    {Kind::kAlpaca, "alpaca/alpaca_data.json", false, "", ""},
    {Kind::kAlpaca, "code_alpaca/*.json", false, "", ""},
    {Kind::kPython18k, "python18k/train.jsonl", true, "python18k/train.parquet", kPython18kHint},
    {Kind::kGsm8k, "gsm8k/train.jsonl", false, "", ""},
    {Kind::kHagrid, "hagrid/train.jsonl", true, "", ""},
}};
constexpr std::array<PresetEntry, 1> kGsm8k = {{
    {Kind::kGsm8k, "gsm8k/train.jsonl", false, "", ""},
}};
constexpr std::array<std::string_view, 2> kNames = {"default", "gsm8k"};

// The files of `entry` under `data`: the file itself when it exists, or the matches of a
// "DIR/*.EXT" pattern in name order.
std::vector<std::string> Matches(const PresetEntry& entry, const fs::path& data) {
  std::vector<std::string> found;
  const std::string_view rel = entry.relative_path;
  const size_t star = rel.find("/*");
  std::error_code error;
  if (star == std::string_view::npos) {
    if (fs::exists(data / rel, error)) found.push_back((data / rel).string());
    return found;
  }
  const fs::path dir = data / rel.substr(0, star);
  const std::string_view suffix = rel.substr(star + 2);
  if (!fs::is_directory(dir, error)) return found;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    std::error_code status_error;
    if (name.size() > suffix.size() && name.ends_with(suffix) &&
        it->is_regular_file(status_error)) {
      found.push_back(it->path().string());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

std::span<const std::string_view> PresetNames() { return kNames; }

std::span<const PresetEntry> PresetTable(std::string_view preset) {
  if (preset == "default") return kDefault;
  if (preset == "gsm8k") return kGsm8k;
  std::string valid;
  for (std::string_view name : kNames) valid.append(valid.empty() ? "" : ", ").append(name);
  throw CorpusError(CorpusError::Code::kInvalidArgument,
                    "unknown preset '" + std::string(preset) + "' (valid: " + valid + ")");
}

ResolvedPreset ResolvePreset(std::string_view preset, const std::string& data_dir) {
  const std::span<const PresetEntry> table = PresetTable(preset);
  const fs::path data(data_dir);
  std::error_code error;
  if (!fs::is_directory(data, error)) {
    throw CorpusError(CorpusError::Code::kIo,
                      data_dir + ": data folder not found (preset '" + std::string(preset) +
                          "'; fetch it with corpora/fetch.sh " + data_dir + ")");
  }
  ResolvedPreset resolved;
  std::string missing;
  for (const PresetEntry& entry : table) {
    const std::vector<std::string> files = Matches(entry, data);
    for (const std::string& file : files) resolved.corpora.push_back({entry.kind, file});
    if (!files.empty()) continue;
    const std::string rel(entry.relative_path);
    if (!entry.optional) {
      missing.append(missing.empty() ? "" : ", ").append(rel);
      continue;
    }
    std::string note = "preset '" + std::string(preset) + "': optional " + rel +
                       " not found under " + data_dir + "; left out";
    if (!entry.unprepared_path.empty() && fs::exists(data / entry.unprepared_path, error)) {
      note.append(" (").append(entry.unprepared_hint).append(")");
    }
    resolved.notes.push_back(std::move(note));
  }
  if (!missing.empty()) {
    throw CorpusError(CorpusError::Code::kIo,
                      data_dir + ": preset '" + std::string(preset) + "' needs " + missing +
                          ", missing (layout in corpora/README.md; corpora/fetch.sh " + data_dir +
                          " fetches it)");
  }
  return resolved;
}

}  // namespace sam::corpora
