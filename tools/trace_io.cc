#include "trace_io.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "sam/error.h"

namespace sam::tools {

using nlohmann::json;

namespace {

// `where` with the field `field`.
ErrorContext InField(ErrorContext where, const char* field) {
  where.field = field;
  return where;
}

std::vector<uint32_t> ReadIds(const json& j, const ErrorContext& where, const char* field) {
  if (!j.is_array())
    throw Error(ErrorCode::kBadRecord, InField(where, field), "must be an array of ids");
  std::vector<uint32_t> ids;
  for (const json& v : j) {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > UINT32_MAX)
      throw Error(ErrorCode::kBadValue, InField(where, field), "holds a non-id value " + v.dump());
    ids.push_back(v.get<uint32_t>());
  }
  return ids;
}

}  // namespace

std::vector<runtime::ReplayTrace> ReadTraces(const std::string& path,
                                             const indexer::Tokenizer* tokenizer, uint32_t bos,
                                             uint32_t vocab_size, const std::string& tenant_field) {
  FieldEncoder encode;
  if (tokenizer != nullptr)
    encode = [tokenizer](std::string_view text, bool is_prompt, std::vector<uint32_t>* out) {
      if (is_prompt)
        tokenizer->EncodePrompt(text, out);
      else
        tokenizer->Encode(text, out);
    };
  return ReadTraces(path, encode, bos, vocab_size, tenant_field);
}

std::vector<runtime::ReplayTrace> ReadTraces(const std::string& path, const FieldEncoder& encode,
                                             uint32_t bos, uint32_t vocab_size,
                                             const std::string& tenant_field) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::kIo, {.file = path}, "cannot open traces");
  std::vector<runtime::ReplayTrace> traces;
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const ErrorContext where{.file = path, .record = "line " + std::to_string(line_no)};
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e400
      throw Error(ErrorCode::kInvalidJson, where, std::string("invalid JSON: ") + e.what());
    }
    if (!j.is_object()) throw Error(ErrorCode::kBadRecord, where, "a trace must be a JSON object");
    runtime::ReplayTrace t;
    t.id = j.contains("id") ? (j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump())
                            : std::to_string(line_no);
    if (j.contains("category") && !j["category"].is_string())
      throw Error(ErrorCode::kBadRecord, InField(where, "category"),
                  "must be a string, found " + j["category"].dump());
    t.category = j.value("category", std::string("all"));
    if (!tenant_field.empty()) {
      if (!j.contains(tenant_field))
        throw Error(ErrorCode::kBadRecord, InField(where, tenant_field.c_str()),
                    "the tenant field is missing");
      const json& v = j[tenant_field];
      t.tenant = v.is_string() ? v.get<std::string>() : v.dump();
    }
    auto text_or_ids = [&](const char* text_field, const char* ids_field, bool is_prompt) {
      if (j.contains(ids_field)) return ReadIds(j[ids_field], where, ids_field);
      if (!j.contains(text_field) || !j[text_field].is_string())
        throw Error(ErrorCode::kBadRecord, InField(where, text_field),
                    std::string("needs a string \"") + text_field + "\" or an id array \"" +
                        ids_field + "\"");
      if (!encode)
        throw Error(ErrorCode::kInvalidArgument, InField(where, text_field),
                    std::string("string \"") + text_field + "\" needs --tokenizer (or give \"" +
                        ids_field + "\")");
      std::vector<uint32_t> ids;
      try {
        encode(j[text_field].get_ref<const std::string&>(), is_prompt, &ids);
      } catch (const std::exception& e) {
        throw Error(ErrorCode::kTokenizer, InField(where, text_field),
                    std::string("tokenization failed: ") + e.what());
      }
      return ids;
    };
    t.prompt = text_or_ids("prompt", "prompt_ids", true);
    t.output = text_or_ids("output", "output_ids", false);
    if (bos != format::kNoToken && (t.prompt.empty() || t.prompt.front() != bos))
      t.prompt.insert(t.prompt.begin(), bos);
    for (const auto* ids : {&t.prompt, &t.output})
      for (uint32_t id : *ids)
        if (id >= vocab_size)
          throw Error(ErrorCode::kBadValue, where,
                      "token id " + std::to_string(id) + " is outside the vocabulary (size " +
                          std::to_string(vocab_size) + ")");
    if (t.output.empty()) continue;  // nothing to replay
    traces.push_back(std::move(t));
  }
  if (traces.empty())
    throw Error(ErrorCode::kBadValue, {.file = path}, "no traces with a non-empty output");
  return traces;
}

}  // namespace sam::tools
