// The tokenizer.json backend against Hugging Face's own tokenizers (hf_reference.js), token
// for token. Driven by hf_compare.sh:
//
//   hf_compare texts DATA_DIR OUT.tsv [STRIDE]
//       writes every (or every STRIDE-th) document of the test corpora (Alpaca, both CodeAlpaca files, GSM8K train
//       and test rendered as sam-build renders them with --template raw; HumanEval as prompt +
//       canonical_solution) and an adversarial set, one "corpus<TAB>hex" line each;
//   hf_compare check TOKENIZER TEXTS.tsv IDS.bin DECODED.txt [--round-trip]
//       encodes every text with sam::indexer::Tokenizer and compares with the reference's ids
//       (IDS.bin) and decoded text (DECODED.txt); --round-trip also requires
//       Decode(Encode(text)) == text (with invalid UTF-8 repaired as U+FFFD). Prints agreement
//       per corpus and the encoding speed (one thread); exits 1 on any difference.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "sam/corpora/corpora.h"
#include "sam/indexer/tokenizer.h"

namespace {

std::string Hex(std::string_view s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * s.size());
  for (const char c : s) {
    out.push_back(digits[static_cast<uint8_t>(c) >> 4]);
    out.push_back(digits[static_cast<uint8_t>(c) & 15]);
  }
  return out;
}

std::string Unhex(std::string_view h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(std::string(h.substr(i, 2)), nullptr, 16)));
  return out;
}

std::vector<std::string> Adversarial() {
  std::vector<std::string> t = {
      "",
      "👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 family: 👩🏻‍❤️‍💋‍👨🏼 ✌︎ ❤️",
      "日本語のテキストと中文文本，한국어 텍스트。カタカナ ひらがな 漢字123",
      "e\u0301 a\u0308 \u00c5 vs A\u030a, \u1e31\u0337\u031b\u0318 \u0915\u094d\u0937 \u0e01\u0e34",
      "abc\xff\xfe def",
      "\xc3",
      "tail \xe2\x82",
      "x\xf0\x9f\x98 y",
      "\xed\xa0\x80 surrogate",
      "\xc0\xaf overlong",
      "\xf8\x88\x80\x80\x80 five",
      "\x80\x80 lone continuation",
      std::string(1000, ' '),
      std::string("a").append(500, ' ').append("b"),
      "1234567890123456789012345678901234567890123456789012345678901234567890",
      std::string(200, '\n'),
      "x\r\n\r\n\r\ny  \n\n  z\t\t \t\n",
      "<|begin_of_text|>hello<|end_of_text|>",
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
      "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>x<\xef\xbd\x9c"
      "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
      "<bos><start_of_turn>user\nHi<end_of_turn>",
      "<|special|> <|reserved_special_token_5|> and <|eot_id|> <|begin_of_te",
      "mongolian\u180eseparator nbsp\u00a0x ideographic\u3000x line\u2028x next\u0085x",
      "IT'S 'LL 'Ve \u017f 'S \u212a",
      "Hello world! It's 1999-10-01, 3.14159; x=42**2\n\n\tdef f(x):\n    return x",
      "\U0001F9EC \U00013000 \ua66e \U0010FFFD",
      "a\u2581b \u2581\u2581 x",
      std::string(3000, 'a'),
      "   leading spaces and trailing   ",
      "\t\ttabs\t",
  };
  // Random mixtures of the above's ingredients (fixed seed).
  const std::vector<std::string> atoms = {
      "a", "Z", "the", " ", "  ", "\n", "\r\n", "\t", "0", "42", "1234", ".", ",", "'s", "'LL",
      "!", "?", "-", "_", "(", ")", "{", "}", "日本", "中文", "한", "é", "e\u0301", "👍",
      "\u200d", "🏽", "\u00a0", "\u3000", "\xff", "\xe2\x82", "<|im_end|>", "<|eot_id|>",
      "<bos>", "<|", "|>", "\u2581", "ſ", "ǅ", "٣", "\u0660"};
  std::mt19937 rng(12345);
  for (int k = 0; k < 2000; ++k) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) s += atoms[rng() % atoms.size()];
    t.push_back(std::move(s));
  }
  return t;
}

int WriteTexts(const std::string& data, const std::string& out_path, size_t stride) {
  std::ofstream out(out_path, std::ios::binary);
  size_t counter = 0;
  const auto emit = [&](const std::string& corpus, const std::string& text) {
    if (corpus == "adversarial" || counter++ % stride == 0)
      out << corpus << '\t' << Hex(text) << '\n';
  };
  using sam::corpora::Kind;
  const std::vector<std::pair<std::string, std::string>> files = {
      {"alpaca", "alpaca/alpaca_data.json"},
      {"code_alpaca_2k", "code_alpaca/code_alpaca_2k.json"},
      {"new_codealpaca", "code_alpaca/new_codealpaca.json"},
      {"gsm8k_train", "gsm8k/train.jsonl"},
      {"gsm8k_test", "gsm8k/test.jsonl"}};
  for (const auto& [name, file] : files) {
    const Kind kind = name.rfind("gsm8k", 0) == 0 ? Kind::kGsm8k : Kind::kAlpaca;
    sam::corpora::ReadCorpus(kind, data + "/" + file, {},
                             [&](std::string&& d) { emit(name, d); });
  }
  std::ifstream humaneval(data + "/humaneval/HumanEval.jsonl");
  if (!humaneval) throw std::runtime_error(data + "/humaneval/HumanEval.jsonl: cannot open");
  for (std::string line; std::getline(humaneval, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    emit("humaneval", j.at("prompt").get<std::string>() + j.at("canonical_solution").get<std::string>());
  }
  for (const std::string& t : Adversarial()) emit("adversarial", t);
  return out ? 0 : 1;
}

// from_utf8_lossy, independently of the backend's own repair: std::wstring_convert is gone, so
// this follows the Unicode "maximal subpart" rule directly.
std::string Lossy(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    int need = -1;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c < 0x80) need = 0;
    else if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) { need = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { need = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    if (need < 0) { out += "\xEF\xBF\xBD"; ++i; continue; }
    int k = 1;
    while (k <= need && i + k < s.size()) {
      const uint8_t x = static_cast<uint8_t>(s[i + k]);
      if (x < (k == 1 ? lo : 0x80) || x > (k == 1 ? hi : 0xBF)) break;
      ++k;
    }
    if (k == need + 1) { out.append(s.substr(i, k)); i += k; }
    else { out += "\xEF\xBF\xBD"; i += k; }
  }
  return out;
}

int Check(const std::string& tokenizer_path, const std::string& texts_path,
          const std::string& ids_path, const std::string& decoded_path, bool round_trip) {
  const auto tok = sam::indexer::Tokenizer::Load(tokenizer_path);
  std::ifstream texts(texts_path, std::ios::binary), ids_in(ids_path, std::ios::binary),
      decoded_in(decoded_path, std::ios::binary);
  if (!texts || !ids_in || !decoded_in) throw std::runtime_error("cannot open the inputs");
  struct Row { uint64_t docs = 0, ids_equal = 0, decode_equal = 0, round_trip = 0, tokens = 0; };
  std::map<std::string, Row> rows;
  std::vector<std::string> order;
  sam::indexer::Tokenizer::Cache cache;
  std::vector<uint32_t> ids;
  double seconds = 0;
  uint64_t tokens = 0, bytes = 0;
  int failures_shown = 0;
  std::string line, decoded_hex;
  while (std::getline(texts, line)) {
    const size_t tab = line.find('\t');
    const std::string corpus = line.substr(0, tab);
    const std::string text = Unhex(std::string_view(line).substr(tab + 1));
    if (!rows.count(corpus)) order.push_back(corpus);
    Row& row = rows[corpus];
    uint32_t n = 0;
    if (!ids_in.read(reinterpret_cast<char*>(&n), 4)) throw std::runtime_error("ids.bin too short");
    std::vector<uint32_t> ref(n);
    if (n && !ids_in.read(reinterpret_cast<char*>(ref.data()), 4 * std::streamsize{n}))
      throw std::runtime_error("ids.bin too short");
    if (!std::getline(decoded_in, decoded_hex)) throw std::runtime_error("decoded.txt too short");
    ids.clear();
    const auto start = std::chrono::steady_clock::now();
    tok.Encode(text, &ids, &cache);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    tokens += ids.size();
    bytes += text.size();
    ++row.docs;
    row.tokens += ref.size();
    const bool same = ids == ref;
    row.ids_equal += same;
    const std::string decoded = tok.Decode(ref);
    const bool decode_same = decoded == Unhex(decoded_hex);
    row.decode_equal += decode_same;
    const bool trip = tok.Decode(ids) == Lossy(text);
    row.round_trip += trip;
    if ((!same || !decode_same || (round_trip && !trip)) && failures_shown++ < 5) {
      std::cerr << "MISMATCH in " << corpus << " (text hex " << Hex(text).substr(0, 400)
                << "):\n  ids " << (same ? "equal" : "differ") << ", decode "
                << (decode_same ? "equal" : "differs") << ", round trip " << (trip ? "ok" : "not")
                << "\n  ours:";
      for (size_t k = 0; k < std::min<size_t>(ids.size(), 40); ++k) std::cerr << ' ' << ids[k];
      std::cerr << "\n  ref: ";
      for (size_t k = 0; k < std::min<size_t>(ref.size(), 40); ++k) std::cerr << ' ' << ref[k];
      std::cerr << '\n';
    }
  }
  bool ok = true;
  std::printf("%-16s %8s %10s %10s %10s %11s\n", "corpus", "docs", "ids_equal", "decode_eq",
              "round_trip", "ref_tokens");
  for (const std::string& c : order) {
    const Row& r = rows[c];
    std::printf("%-16s %8llu %10llu %10llu %10llu %11llu\n", c.c_str(),
                static_cast<unsigned long long>(r.docs),
                static_cast<unsigned long long>(r.ids_equal),
                static_cast<unsigned long long>(r.decode_equal),
                static_cast<unsigned long long>(r.round_trip),
                static_cast<unsigned long long>(r.tokens));
    ok &= r.ids_equal == r.docs && r.decode_equal == r.docs && (!round_trip || r.round_trip == r.docs);
  }
  std::printf("ours: %llu tokens, %.1f MB in %.2f s, one thread: %.2f M tokens/s\n",
              static_cast<unsigned long long>(tokens), bytes / 1e6, seconds, tokens / seconds / 1e6);
  std::printf("%s\n", ok ? "ALL EQUAL" : "DIFFERENCES FOUND");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if ((args.size() == 3 || args.size() == 4) && args[0] == "texts")
      return WriteTexts(args[1], args[2], args.size() == 4 ? std::stoul(args[3]) : 1);
    if ((args.size() == 5 || (args.size() == 6 && args[5] == "--round-trip")) && args[0] == "check")
      return Check(args[1], args[2], args[3], args[4], args.size() == 6);
    std::cerr << "usage: hf_compare texts DATA_DIR OUT | check TOKENIZER TEXTS IDS DECODED "
                 "[--round-trip]\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "hf_compare: " << e.what() << '\n';
    return 1;
  }
}
