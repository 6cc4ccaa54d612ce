// bench-build: end-to-end build speed and memory of sam-build's pipeline, and
// the construction alone, as medians over repeated runs. Prints figures; it
// asserts nothing.
//
//   bench-build --data-dir ../shared/data [--preset default] [--repeats 3] [-o /tmp/b.sam]
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "sam/corpora/corpora.h"
#include "sam/automaton/builder.h"
#include "sam/indexer/pipeline.h"
#include "sam/indexer/tokenizer.h"
#include "sam/runtime/percentile.h"

namespace {

using sam::runtime::Median;

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  sam::tools::SetUpTool("bench-build");
  CLI::App app{"bench-build: time the index build (end to end, and construction alone), as\n"
               "medians over repeated runs. Prints figures; asserts nothing.\n\n"
               "Examples:\n"
               "  bench-build --data-dir ../shared/data\n"
               "  bench-build --data-dir ../shared/data --preset gsm8k --repeats 5 -o /tmp/b.sam",
               "bench-build"};
  std::string data_dir, preset = "default", out = "/tmp/bench-build.sam";
  int repeats = 3;
  app.add_option("--data-dir", data_dir, "data folder (corpora/README.md layout; required)")
      ->envname("SAM_DATA_DIR")
      ->required();
  app.add_option("--preset", preset, "corpus set: default or gsm8k")
      ->check(CLI::IsMember({"default", "gsm8k"}))
      ->capture_default_str();
  app.add_option("--repeats", repeats, "runs per measurement")
      ->check(CLI::Range(1, 50))
      ->capture_default_str();
  app.add_option("-o,--output", out, "scratch index path")->capture_default_str();
  if (const auto status = sam::tools::ParseCommandLine(app, argc, argv)) return *status;
  namespace fs = std::filesystem;
  return sam::tools::RunTool("bench-build", [&] {
    // The corpus set of sam-build's presets.
    sam::indexer::BuildConfig cfg;
    cfg.tokenizer_path = (fs::path(data_dir) / "tokenizer/llama-32k.model").string();
    cfg.output_path = out;
    cfg.tool_version = "bench-build";
    std::vector<std::string> inputs;
    if (preset == "default") {
      cfg.corpora.push_back({"alpaca", (fs::path(data_dir) / "alpaca/alpaca_data.json").string()});
      for (const char* f : {"code_alpaca/code_alpaca_2k.json", "code_alpaca/new_codealpaca.json"})
        if (fs::exists(fs::path(data_dir) / f))
          cfg.corpora.push_back({"alpaca", (fs::path(data_dir) / f).string()});
    }
    cfg.corpora.push_back({"gsm8k", (fs::path(data_dir) / "gsm8k/train.jsonl").string()});
    for (const auto& c : cfg.corpora) inputs.push_back(c.path);
    inputs.push_back(cfg.tokenizer_path);
    sam::tools::CheckOutputPath("-o", out, inputs);

    std::vector<double> total, rd, tokz, cons, wr, cpu;
    uint64_t tokens = 0, peak = 0, bytes = 0;
    for (int r = 0; r < repeats; ++r) {
      const double c0 = CpuSeconds();
      const auto rep = sam::indexer::BuildIndex(cfg);
      cpu.push_back(CpuSeconds() - c0);
      total.push_back(rep.total_seconds);
      rd.push_back(rep.read_seconds);
      tokz.push_back(rep.tokenize_seconds);
      cons.push_back(rep.construct_seconds);
      wr.push_back(rep.write_seconds);
      tokens = rep.tokens;
      bytes = rep.file_bytes;
      if (r == 0) peak = rep.peak_rss_bytes;  // later runs reuse freed memory
    }
    std::printf("end to end (%d runs, median): %.2f s = %.3fM tokens/s; cpu %.2f s\n", repeats,
                Median(total), tokens / Median(total) / 1e6, Median(cpu));
    std::printf("  stages: read %.2f s, tokenize (not overlapped with construction) %.2f s, "
                "construct %.2f s, freeze+write %.2f s\n",
                Median(rd), Median(tokz), Median(cons), Median(wr));
    std::printf("  tokens %llu, file %.2f bytes/token, peak RSS %.1f bytes/token (first run)\n",
                (unsigned long long)tokens, double(bytes) / tokens, double(peak) / tokens);

    // Construction alone, from ids already in memory, single-threaded.
    auto tok = sam::indexer::Tokenizer::Load(cfg.tokenizer_path);
    sam::indexer::Tokenizer::Cache cache;
    std::vector<std::vector<uint32_t>> docs;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& c : cfg.corpora)
      sam::corpora::ReadCorpus(sam::corpora::ParseKind(c.kind), c.path, {}, [&](std::string&& d) {
        std::vector<uint32_t> ids{tok.bos_id()};
        tok.Encode(d, &ids, &cache);
        docs.push_back(std::move(ids));
      });
    const double tok1 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("read + tokenize on one thread: %.2f s (%.2fM tokens/s)\n", tok1,
                tokens / tok1 / 1e6);
    std::vector<double> cons_only, cons_cpu;
    for (int r = 0; r < repeats; ++r) {
      const double c0 = CpuSeconds();
      const auto t1 = std::chrono::steady_clock::now();
      sam::automaton::SuffixAutomatonBuilder b(tok.vocab_size(), tokens);
      for (const auto& d : docs) b.AddDocument(d);
      cons_only.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
      cons_cpu.push_back(CpuSeconds() - c0);
    }
    std::printf("construction alone (median of %d): %.2f s wall, %.2f s cpu = %.2fM tokens/s\n",
                repeats, Median(cons_only), Median(cons_cpu), tokens / Median(cons_only) / 1e6);
    fs::remove(out);
    return 0;
  });
}
