// Memory-bounded builds and shard sets: the shards partition the documents in
// order at document boundaries, each within its token budget; a build that
// fits writes one index; the manifest and every shard are checked on open,
// and a missing, corrupted or foreign shard is refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "sam/format/index.h"
#include "sam/format/shard_set.h"
#include "sam/automaton/builder.h"
#include "sam/indexer/pipeline.h"
#include "temp_dir.h"
#include "thrown.h"

namespace {

namespace fs = std::filesystem;
using sam::ErrorCode;
using sam::format::IndexFile;
using sam::format::ShardSet;
using sam::indexer::BuildConfig;
using sam::indexer::BuildReport;
using Docs = std::vector<std::vector<uint32_t>>;

constexpr uint32_t kVocab = 40;

Docs RandomDocs(std::mt19937& rng, size_t n) {
  Docs docs(n);
  for (auto& d : docs) {
    d.resize(1 + rng() % 150);
    for (auto& t : d) t = rng() % kVocab;
  }
  return docs;
}

std::string WriteIds(const fs::path& path, const Docs& docs) {
  std::ofstream out(path);
  for (const auto& d : docs) {
    out << "[";
    for (size_t i = 0; i < d.size(); ++i) out << (i ? "," : "") << d[i];
    out << "]\n";
  }
  return path.string();
}

// A bound that leaves room for about `tokens` tokens per shard beside what
// the process and the corpus already take.
// (The build plans with 1/16 of the bound kept free.)
uint64_t BoundFor(uint64_t tokens, const std::string& corpus) {
  return (sam::indexer::CurrentRssBytes() + fs::file_size(corpus) +
          tokens * sam::indexer::kBuildPeakBytesPerToken) *
         16 / 15;
}

BuildReport Build(const std::string& corpus, const fs::path& out, uint64_t max_memory) {
  BuildConfig cfg;
  cfg.vocab_size = kVocab;
  cfg.corpora = {{"ids", corpus}};
  cfg.output_path = out.string();
  cfg.max_memory_bytes = max_memory;
  cfg.threads = 1;
  return sam::indexer::BuildIndex(cfg);
}

sam::format::OpenOptions Checks(bool verify) {
  sam::format::OpenOptions o;
  o.verify = verify;
  return o;
}

// The documents an index holds, in order (read back from its text).
Docs DocumentsOf(const sam::format::IndexView& v) {
  Docs docs(1);
  for (uint64_t p = 1; p <= v.num_tokens(); ++p) {
    if (v.IsDocumentEnd(p)) docs.emplace_back();
    else docs.back().push_back(v.Token(p));
  }
  docs.pop_back();
  return docs;
}

TEST(ShardedBuild, ShardsPartitionTheDocumentsInOrderWithinTheBudget) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "budgets are planned from the process's RSS, which AddressSanitizer's "
                  "quarantine keeps high after each shard";
#endif
  std::mt19937 rng(11);
  const Docs docs = RandomDocs(rng, 4000);
  uint64_t total = 0;
  for (const auto& d : docs) total += d.size() + 1;
  sam::testing::TempDir dir;
  const std::string corpus = WriteIds(dir.path() / "docs.jsonl", docs);
  for (const uint64_t parts : {2u, 3u, 7u}) {
    const fs::path out = dir.path() / ("set" + std::to_string(parts) + ".sam");
    const BuildReport r = Build(corpus, out, BoundFor(total / parts + 1, corpus));
    ASSERT_GE(r.shards.size(), 2u) << parts;
    EXPECT_EQ(r.index_path, (dir.path() / ("set" + std::to_string(parts) + ".samset")).string());
    EXPECT_FALSE(fs::exists(out));
    const ShardSet set = ShardSet::Open(r.index_path, Checks(true));
    ASSERT_EQ(set.shards().size(), r.shards.size());
    EXPECT_EQ(set.num_tokens(), total);
    EXPECT_EQ(set.num_documents(), docs.size());
    Docs joined;
    for (size_t k = 0; k < set.shards().size(); ++k) {
      const auto& v = set.shards()[k].view();
      const Docs part = DocumentsOf(v);
      // Within the budget, unless one document alone exceeds it.
      const uint64_t budget = r.shards[k].token_budget;
      EXPECT_GE(budget, r.shard_token_budget);
      EXPECT_TRUE(v.num_tokens() <= budget || part.size() == 1) << k;
      // Closed only when the next document would not fit.
      if (k + 1 < set.shards().size()) {
        EXPECT_GT(v.num_tokens() + docs[joined.size() + part.size()].size() + 1, budget);
      }
      EXPECT_EQ(r.shards[k].first_document, joined.size());
      EXPECT_EQ(r.shards[k].peak_rss_bytes > 0, true);
      joined.insert(joined.end(), part.begin(), part.end());
    }
    EXPECT_EQ(joined, docs) << parts;
    // Each shard is the index of its documents: identical to building them alone.
    const fs::path alone = dir.path() / "alone.sam";
    const Docs first(docs.begin(), docs.begin() + set.manifest().shards[0].documents);
    sam::automaton::BuildIndexFile(first, kVocab, alone.string());
    const IndexFile a = IndexFile::Open(alone.string());
    const auto& s0 = set.shards()[0].view();
    ASSERT_EQ(a.view().num_states(), s0.num_states());
    for (uint64_t v = 0; v < s0.num_states(); ++v) {
      ASSERT_EQ(a.view().Link(v), s0.Link(v));
      ASSERT_EQ(a.view().Count(v), s0.Count(v));
    }
  }
}

TEST(ShardedBuild, ABuildThatFitsWritesOneIndex) {
  std::mt19937 rng(12);
  const Docs docs = RandomDocs(rng, 100);
  sam::testing::TempDir dir;
  const std::string corpus = WriteIds(dir.path() / "docs.jsonl", docs);
  const fs::path out = dir.path() / "one.sam";
  const BuildReport r = Build(corpus, out, uint64_t{1} << 34);
  EXPECT_TRUE(r.shards.empty());
  EXPECT_EQ(r.index_path, out.string());
  EXPECT_EQ(DocumentsOf(IndexFile::Open(out.string(), Checks(true)).view()), docs);
  EXPECT_FALSE(fs::exists(dir.path() / "one.samset"));
  // Asked for a .samset, a build that fits writes BASE.sam.
  const BuildReport r2 = Build(corpus, dir.path() / "two.samset", uint64_t{1} << 34);
  EXPECT_EQ(r2.index_path, (dir.path() / "two.sam").string());
  EXPECT_TRUE(fs::exists(dir.path() / "two.sam"));
}

TEST(ShardedBuild, TooSmallABoundIsRefused) {
  std::mt19937 rng(13);
  sam::testing::TempDir dir;
  const std::string corpus = WriteIds(dir.path() / "docs.jsonl", RandomDocs(rng, 10));
  const sam::Error e = sam::testing::Thrown([&] { Build(corpus, dir.path() / "x.sam", 1 << 20); });
  EXPECT_EQ(e.code(), ErrorCode::kCapacity);
  EXPECT_NE(std::string(e.what()).find("too small"), std::string::npos) << e.what();
  EXPECT_FALSE(fs::exists(dir.path() / "x.0.sam"));
}

// --shard I/N: document g (reading order over the corpora) goes to shard
// g mod N; the N files join into a shard set holding every document once.
TEST(PartitionedBuild, ShardsHoldDocumentsGModNAndJoinIntoASet) {
  std::mt19937 rng(15);
  const Docs first = RandomDocs(rng, 50), second = RandomDocs(rng, 31);
  sam::testing::TempDir dir;
  const std::string a = WriteIds(dir.path() / "a.jsonl", first);
  const std::string b = WriteIds(dir.path() / "b.jsonl", second);
  Docs all = first;
  all.insert(all.end(), second.begin(), second.end());
  constexpr uint64_t kParts = 3;
  std::vector<std::string> files;
  for (uint64_t i = 0; i < kParts; ++i) {
    BuildConfig cfg;
    cfg.vocab_size = kVocab;
    cfg.corpora = {{"ids", a}, {"ids", b}};
    cfg.output_path = (dir.path() / ("p." + std::to_string(i) + ".sam")).string();
    cfg.shard_index = i;
    cfg.shard_count = kParts;
    sam::indexer::BuildIndex(cfg);
    Docs expected;
    for (size_t g = 0; g < all.size(); ++g)
      if (g % kParts == i) expected.push_back(all[g]);
    EXPECT_EQ(DocumentsOf(IndexFile::Open(cfg.output_path).view()), expected) << i;
    files.push_back(cfg.output_path);
  }
  const std::string manifest = (dir.path() / "p.samset").string();
  // Refused: a shard missing, a shard twice, a file of no partition.
  sam::Error e = sam::testing::Thrown(
      [&] { sam::indexer::WriteShardSet({files[0], files[2]}, manifest, "test"); });
  EXPECT_NE(std::string(e.what()).find("shards 1 of 3 are missing"), std::string::npos) << e.what();
  e = sam::testing::Thrown(
      [&] { sam::indexer::WriteShardSet({files[0], files[1], files[1]}, manifest, "test"); });
  EXPECT_EQ(e.context().file, files[1]) << e.what();
  const std::string plain = (dir.path() / "plain.sam").string();
  sam::automaton::BuildIndexFile(first, kVocab, plain);
  e = sam::testing::Thrown([&] { sam::indexer::WriteShardSet({plain}, manifest, "test"); });
  EXPECT_EQ(e.context().file, plain) << e.what();
  EXPECT_FALSE(fs::exists(manifest));
  // In any order, joined in partition order.
  sam::indexer::WriteShardSet({files[2], files[0], files[1]}, manifest, "test");
  const ShardSet set = ShardSet::Open(manifest, Checks(true));
  ASSERT_EQ(set.shards().size(), kParts);
  EXPECT_EQ(set.num_documents(), all.size());
  for (uint64_t i = 0; i < kParts; ++i)
    EXPECT_EQ(set.manifest().shards[i].file, fs::path(files[i]).filename().string());
}

// A set of three shards made by the partitioned build (--shard I/3 and
// WriteShardSet), which does not depend on the allocator (the bounded build
// plans from the process's RSS).
class ShardSetRefusals : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 rng(14);
    docs_ = RandomDocs(rng, 600);
    corpus_ = WriteIds(dir_.path() / "docs.jsonl", docs_);
    std::vector<std::string> files;
    for (uint64_t i = 0; i < 3; ++i) {
      BuildConfig cfg;
      cfg.vocab_size = kVocab;
      cfg.corpora = {{"ids", corpus_}};
      cfg.output_path = (dir_.path() / ("set." + std::to_string(i) + ".sam")).string();
      cfg.shard_index = i;
      cfg.shard_count = 3;
      cfg.threads = 1;
      sam::indexer::BuildIndex(cfg);
      paths_.push_back(cfg.output_path);
      bytes_.push_back(fs::file_size(cfg.output_path));
    }
    manifest_ = (dir_.path() / "set.samset").string();
    sam::indexer::WriteShardSet(paths_, manifest_, "test");
    shard1_ = paths_[1];
  }
  // The error opening the set, which must name shard k's file (default 1).
  sam::Error OpenError(bool verify, size_t k = 1) {
    const sam::Error e = sam::testing::Thrown([&] { ShardSet::Open(manifest_, Checks(verify)); });
    EXPECT_EQ(e.context().file, paths_[k]) << e.what();
    EXPECT_NE(std::string(e.what()).find("shard " + std::to_string(k) + " of"), std::string::npos)
        << e.what();
    return e;
  }
  sam::testing::TempDir dir_;
  Docs docs_;
  std::string corpus_, manifest_, shard1_;
  std::vector<std::string> paths_;
  std::vector<uint64_t> bytes_;
};

TEST_F(ShardSetRefusals, MissingShard) {
  fs::remove(shard1_);
  EXPECT_EQ(OpenError(false).code(), ErrorCode::kIo);
}

TEST_F(ShardSetRefusals, CorruptedShard) {
  {
    std::fstream f(shard1_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(9000);
    f.put('\x5a');
  }
  ShardSet::Open(manifest_);  // the cheap checks do not read the sections
  EXPECT_EQ(OpenError(true).code(), ErrorCode::kChecksumMismatch);
  fs::resize_file(shard1_, fs::file_size(shard1_) - 1);
  EXPECT_EQ(OpenError(false).code(), ErrorCode::kTruncated);
}

TEST_F(ShardSetRefusals, ForeignShard) {
  // The smaller of shards 0 and 1 copied over the larger, padded to its
  // recorded size: the counts differ.
  const size_t big = bytes_[0] >= bytes_[1] ? 0 : 1;
  const std::string victim = paths_[big];
  const uint64_t size = fs::file_size(victim);
  fs::copy_file(victim, victim + ".orig");
  fs::copy_file(paths_[1 - big], victim, fs::copy_options::overwrite_existing);
  ASSERT_LE(fs::file_size(victim), size);
  fs::resize_file(victim, size);
  EXPECT_EQ(OpenError(false, big).code(), ErrorCode::kBadHeader);
  fs::rename(victim + ".orig", victim);
  // An index of the same documents built with another tokenizer fingerprint.
  Docs part;
  for (size_t g = 1; g < docs_.size(); g += 3) part.push_back(docs_[g]);
  sam::automaton::IndexInfo info;
  info.tokenizer_sha256[0] = 1;
  const auto w = sam::automaton::BuildIndexFile(part, kVocab, shard1_, info);
  auto m = sam::format::ReadShardSetManifest(manifest_);
  m.shards[1].bytes = w.file_bytes;
  sam::format::WriteShardSetManifest(manifest_, m);
  EXPECT_EQ(OpenError(false).code(), ErrorCode::kTokenizerMismatch);
}

TEST_F(ShardSetRefusals, TamperedManifest) {
  std::string text;
  {
    std::ifstream in(manifest_);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = text.find("\"tokens\": ");
  ASSERT_NE(at, std::string::npos);
  std::string tampered = text;
  tampered[at + 10] = tampered[at + 10] == '9' ? '8' : '9';
  std::ofstream(manifest_, std::ios::trunc) << tampered;
  sam::Error e = sam::testing::Thrown([&] { ShardSet::Open(manifest_); });
  EXPECT_EQ(e.code(), ErrorCode::kChecksumMismatch);
  EXPECT_EQ(e.context().file, manifest_);
  std::ofstream(manifest_, std::ios::trunc) << text.substr(0, text.size() / 2);
  e = sam::testing::Thrown([&] { ShardSet::Open(manifest_); });
  EXPECT_EQ(e.code(), ErrorCode::kTruncated);
  EXPECT_EQ(sam::testing::Thrown([&] { ShardSet::Open(corpus_); }).code(), ErrorCode::kBadMagic);
  EXPECT_FALSE(sam::format::LooksLikeShardSet(paths_[0]));
  // Written again from what was read, the manifest opens again.
  std::ofstream(manifest_, std::ios::trunc) << text;
  const auto m = sam::format::ReadShardSetManifest(manifest_);
  const std::string copy = (dir_.path() / "copy.samset").string();
  sam::format::WriteShardSetManifest(copy, m);
  EXPECT_EQ(ShardSet::Open(copy, Checks(true)).num_documents(), docs_.size());
}

}  // namespace
