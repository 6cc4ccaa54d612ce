// bench-random-model: writes a random Llama checkpoint (config.json + model.safetensors) for tests,
// benchmarks and demos. Its output is noise; its use is to exercise the generation loop, the draft
// model policies and the Python model against the C++ one without a real checkpoint.
//
//   bench-random-model --out /tmp/rnd --tokenizer llama-32k.model            # its vocabulary
//   bench-random-model --out /tmp/rnd --vocab 100 --layers 1 --hidden 32 --seed 2 --force
//
// Exit codes: 0 success, 1 runtime error (an unreadable tokenizer, a write that failed), 2 usage
// error (bad flags, an existing checkpoint in --out without --force).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli.h"
#include "sam/error.h"
#include "sam/format/temp_files.h"
#include "sam/indexer/tokenizer.h"
#include "sam/torch/llama_config.h"
#include "sam/torch/model.h"
#include "sam/torch/safetensors.h"

namespace {

namespace fs = std::filesystem;
namespace tb = sam::torch_backend;
using sam::tools::UsageError;

// Refuses to replace an existing checkpoint file unless `force`; writes both files atomically.
void MakeRandomModel(const fs::path& dir, int64_t vocab, int64_t layers, int64_t hidden,
                     uint64_t seed, bool force, const std::string& tokenizer_path) {
  tb::LlamaConfig c;
  c.hidden_size = hidden;
  c.head_dim = hidden >= 256 ? 64 : 16;
  if (hidden % c.head_dim != 0)
    throw UsageError("--hidden must be a multiple of " + std::to_string(c.head_dim));
  c.num_attention_heads = hidden / c.head_dim;
  c.num_key_value_heads = c.num_attention_heads;
  c.intermediate_size = (hidden * 11 / 4 + 15) / 16 * 16;
  c.num_hidden_layers = layers;
  c.vocab_size = vocab;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-5;
  c.torch_dtype = "float32";
  c.Validate("random model flags");
  const std::string flag = "--out " + dir.string();
  std::error_code ec;
  if (fs::exists(fs::symlink_status(dir, ec)) && !fs::is_directory(dir, ec))
    throw UsageError(flag + ": exists and is not a directory");
  const fs::path config_path = dir / "config.json", weights_path = dir / "model.safetensors";
  for (const fs::path& f : {config_path, weights_path})
    if (!force && fs::exists(fs::symlink_status(f, ec)))
      throw UsageError(flag + ": " + f.string() +
                       " exists; refusing to overwrite a checkpoint (add --force to replace it)");
  fs::create_directories(dir);
  sam::tools::CheckOutputPath("--out", config_path.string(), {tokenizer_path});
  sam::tools::CheckOutputPath("--out", weights_path.string(), {tokenizer_path});
  // The weights go to a temporary name (WriteSafetensors itself writes "<name>.tmp" first), both
  // registered for signal cleanup; config.json is renamed last, so an interrupted run never leaves
  // a config.json beside missing or partial weights.
  const std::string weights_temp = weights_path.string() + ".tmp-" + std::to_string(::getpid());
  const std::string weights_inner = weights_temp + ".tmp";
  sam::format::RegisterTempFile(weights_inner);
  sam::format::RegisterTempFile(weights_temp);
  struct Cleanup {
    std::vector<std::string> paths;
    ~Cleanup() {
      for (const auto& p : paths) {
        ::unlink(p.c_str());
        sam::format::UnregisterTempFile(p);
      }
    }
  } cleanup{{weights_inner, weights_temp}};
  sam::tools::AtomicOutputFile config_file(config_path.string());
  config_file.stream() << c.ToJsonText();
  tb::WriteSafetensors(
      weights_temp, tb::MakeRandomLlamaWeights(c, seed),
      {{"format", "pt"}, {"note", "random weights made by bench-random-model, for testing only"}});
  if (std::rename(weights_temp.c_str(), weights_path.c_str()) != 0)
    throw sam::Error(sam::ErrorCode::kIo, "cannot rename " + weights_temp + " to " +
                                              weights_path.string() + ": " + std::strerror(errno));
  config_file.Commit();
}

}  // namespace

int main(int argc, char** argv) {
  sam::tools::SetUpTool("bench-random-model");
  CLI::App app{
      "bench-random-model: write a random Llama checkpoint (config.json + model.safetensors) for\n"
      "tests and benchmarks. FOR TESTING ONLY: its output is noise.\n"
      "Exit status: 0 success, 1 runtime error, 2 usage error.\n\n"
      "Examples:\n"
      "  bench-random-model --out /tmp/rnd --tokenizer llama-32k.model\n"
      "  bench-random-model --out /tmp/rnd --vocab 100 --layers 1 --hidden 32 --seed 2 --force\n",
      "bench-random-model"};
  std::string dir, tokenizer_path;
  int64_t vocab = 0, layers = 2, hidden = 64;
  uint64_t seed = 1;
  bool force = false;
  app.add_option("--out", dir, "checkpoint directory to write (created if missing)")->required();
  app.add_option("--tokenizer", tokenizer_path,
                 "a SentencePiece .model or tokenizer.json whose vocabulary the model takes");
  app.add_option("--vocab", vocab, "vocabulary size (default: the --tokenizer's)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 24));
  app.add_option("--layers", layers, "layers (default 2)")->check(CLI::Range(int64_t{1}, int64_t{256}));
  app.add_option("--hidden", hidden, "hidden size (default 64)")
      ->check(CLI::Range(int64_t{16}, int64_t{16384}));
  app.add_option("--seed", seed, "seed of the random weights (default 1)");
  app.add_flag("--force", force, "replace an existing checkpoint in --out (default: refuse)");
  if (const auto status = sam::tools::ParseCommandLine(app, argc, argv)) return *status;
  return sam::tools::RunTool("bench-random-model", [&] {
    if (vocab == 0) {
      if (tokenizer_path.empty()) throw UsageError("give --vocab or --tokenizer");
      vocab = sam::indexer::Tokenizer::Load(tokenizer_path).vocab_size();
    }
    MakeRandomModel(dir, vocab, layers, hidden, seed, force, tokenizer_path);
    std::cerr << "bench-random-model: wrote a random model (vocab " << vocab << ", " << layers
              << " layers, hidden " << hidden << ") to " << dir << " -- for testing only\n";
    return 0;
  });
}
