// Tiny SentencePiece models trained inside a test with spm_train (no data folder needed), and
// the command-line helpers the tokenizer tests use as oracles.
//
//   sam::testing::TempDir dir;
//   const auto model = sam::testing::TrainTinySpm(dir.path(), "llama_like",
//                                                 sam::testing::kLlamaLikeFlags);
//
// SAM_SPM_TRAIN (the spm_train program, found by CMake; empty when absent) must be defined.
#ifndef SAM_TESTS_COMMON_TINY_SPM_H_
#define SAM_TESTS_COMMON_TINY_SPM_H_

#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "run_command.h"  // sam::testing::RunCommand, ShellQuote
#include "temp_dir.h"     // sam::testing::TempDir

namespace sam::testing {

inline std::string SpmTrainPath() { return SAM_SPM_TRAIN; }

// Text with the features tokenizers meet: repeated words (so that segments recur), single and
// multiple spaces, leading and trailing spaces, tabs, newlines, digits, punctuation, accented
// letters and CJK. Deterministic for a seed.
inline std::string TinyCorpusLine(std::mt19937& rng) {
  static const std::vector<std::string> kWords = {
      "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "def", "return",
      "print(x)", "for", "i", "in", "range(10):", "café", "naïve", "日本語", "テキスト", "42",
      "3.14", "hello,", "world!", "a", "an", "answer", "question:", "is", "x", "+=", "1;"};
  static const std::vector<std::string> kGaps = {" ", " ", " ", " ", " ", "  ", "   ", "\t", " \t "};
  std::string line;
  const int words = 3 + static_cast<int>(rng() % 12);
  if (rng() % 8 == 0) line += " ";
  for (int w = 0; w < words; ++w) {
    if (w > 0) line += kGaps[rng() % kGaps.size()];
    line += kWords[rng() % kWords.size()];
  }
  if (rng() % 8 == 0) line += "  ";
  return line;
}

// Flags of a model for which segment caching is exact, like LLaMA's: BPE, identity
// normaliser, dummy prefix, extra whitespace kept, byte fallback, digits split.
inline const std::string kLlamaLikeFlags =
    "--model_type=bpe --normalization_rule_name=identity --remove_extra_whitespaces=false "
    "--add_dummy_prefix=true --byte_fallback=true --split_digits=true";

// Trains `dir/name.model` on a generated corpus (seed 1) with `flags` added to a vocabulary
// of 400 pieces and full character coverage; throws when spm_train fails.
inline std::filesystem::path TrainTinySpm(const std::filesystem::path& dir, const std::string& name,
                                          const std::string& flags, const std::string& corpus = "") {
  const std::filesystem::path input = dir / (name + ".txt");
  {
    std::ofstream out(input);
    if (corpus.empty()) {
      std::mt19937 rng(1);
      for (int i = 0; i < 3000; ++i) out << TinyCorpusLine(rng) << "\n";
    } else {
      out << corpus;
    }
  }
  const std::filesystem::path prefix = dir / name;
  const std::string command = ShellQuote(SpmTrainPath()) + " --input=" + ShellQuote(input.string()) +
                              " --model_prefix=" + ShellQuote(prefix.string()) +
                              " --vocab_size=400 --hard_vocab_limit=false --character_coverage=1.0 "
                              "--minloglevel=2 " + flags + " > /dev/null 2>&1";
  const CommandResult r = RunCommand(command);
  const std::filesystem::path model = prefix.string() + ".model";
  if (r.exit_code != 0 || !std::filesystem::exists(model))
    throw std::runtime_error("spm_train failed (" + std::to_string(r.exit_code) + "): " + command);
  return model;
}

// sha256sum's hex digest of a file ("" on failure).
inline std::string Sha256sumOf(const std::filesystem::path& file) {
  const CommandResult r = RunCommand("sha256sum " + ShellQuote(file.string()));
  if (r.exit_code != 0 || r.output.size() < 64) return "";
  return r.output.substr(0, 64);
}

}  // namespace sam::testing

#endif  // SAM_TESTS_COMMON_TINY_SPM_H_
