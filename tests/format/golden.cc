#include "golden.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>


namespace sam::golden {
namespace fs = std::filesystem;

namespace {

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error(p.string() + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

format::Sha256Digest DigestOfHex(const std::string& hex) {
  format::Sha256Digest d{};
  if (hex.size() != 64) throw std::runtime_error("tokenizer_sha256 needs 64 hex digits");
  for (size_t i = 0; i < 32; ++i) d[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  return d;
}

uint32_t IdOrNone(const nlohmann::json& j, const char* key) {
  return j.contains(key) && !j[key].is_null() ? j[key].get<uint32_t>() : format::kNoToken;
}

}  // namespace

GoldenSpec LoadGoldenSpec(const fs::path& json_path) {
  GoldenSpec spec;
  spec.name = json_path.stem().string();
  try {
    const auto j = nlohmann::json::parse(ReadFile(json_path));
    spec.vocab_size = j.at("vocab_size").get<uint32_t>();
    if (j.contains("documents")) {
      spec.documents = j["documents"].get<std::vector<std::vector<uint32_t>>>();
    } else {
      // One document per non-empty line of a text file, its bytes as ids.
      std::istringstream lines(ReadFile(json_path.parent_path() / j.at("documents_text")));
      for (std::string line; std::getline(lines, line);)
        if (!line.empty()) spec.documents.emplace_back(line.begin(), line.end());
      for (auto& d : spec.documents)
        for (auto& id : d) id &= 0xff;  // char is signed: the byte value
    }
    automaton::IndexInfo& info = spec.info;
    info.bos_id = IdOrNone(j, "bos_id");
    info.eos_id = IdOrNone(j, "eos_id");
    if (j.contains("tokenizer_sha256"))
      info.tokenizer_sha256 = DigestOfHex(j["tokenizer_sha256"].get<std::string>());
    info.metadata_json = j.at("metadata").dump();
    if (j.contains("vocabulary")) {
      if (j["vocabulary"].is_string() && j["vocabulary"] == "bytes") {
        // Byte b: itself if printable ASCII, else <0xNN>.
        for (uint32_t b = 0; b < spec.vocab_size; ++b) {
          char hex[16];
          std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
          info.vocabulary.push_back(b >= 0x20 && b < 0x7f ? std::string(1, char(b)) : hex);
        }
      } else {
        info.vocabulary = j["vocabulary"].get<std::vector<std::string>>();
      }
    }
    if (j.contains("accelerators")) {
      const auto& a = j["accelerators"];
      info.accelerators = format::AcceleratorParams{
          .min_degree = a.at("min_degree").get<uint32_t>(),
          .top_k = a.at("top_k").get<uint32_t>(),
          .filter_bits_per_edge = a.at("filter_bits_per_edge").get<uint32_t>(),
          .record_min_count = a.value("record_min_count", uint32_t{0}),
          .clone_labels = a.value("clone_labels", false)};
    }
    info.self_test_samples = j.at("self_test_samples").get<uint32_t>();
    info.self_test_seed = j.at("self_test_seed").get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(json_path.string() + ": " + e.what());
  }
  return spec;
}

std::vector<fs::path> GoldenSpecs(const fs::path& dir) {
  std::vector<fs::path> specs;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") specs.push_back(e.path());
  std::sort(specs.begin(), specs.end());
  return specs;
}

void BuildGolden(const GoldenSpec& spec, const std::string& path) {
  automaton::BuildIndexFile(spec.documents, spec.vocab_size, path, spec.info);
}

}  // namespace sam::golden
