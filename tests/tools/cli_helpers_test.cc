// The helpers behind every tool's outputs (tools/cli.h) and the temporary-file registry they share
// with the index writer (sam/format/temp_files.h). Expected outcomes are file-system facts
// checked with stat(2), not the helpers' own reports.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "sam/format/temp_files.h"
#include "sam/format/writer.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;
using sam::tools::UsageError;

class CliHelpers : public ::testing::Test {
 protected:
  std::string Touch(const std::string& name, const std::string& text = "x") {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static bool Exists(const std::string& path) {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0;
  }

  sam::testing::TempDir tmp_{"sam_cli_helpers_test"};
  const fs::path dir_ = tmp_.path();
};

TEST_F(CliHelpers, RegistryRemovesExactlyTheRegisteredFiles) {
  const std::string a = Touch("a"), b = Touch("b"), c = Touch("c");
  ASSERT_TRUE(sam::format::RegisterTempFile(a));
  ASSERT_TRUE(sam::format::RegisterTempFile(b));
  sam::format::UnregisterTempFile(b);
  sam::format::RemoveRegisteredTempFiles();
  EXPECT_FALSE(Exists(a));
  EXPECT_TRUE(Exists(b));
  EXPECT_TRUE(Exists(c));
  sam::format::UnregisterTempFile(a);
  Touch("a");
  sam::format::RemoveRegisteredTempFiles();  // `a` is no longer registered
  EXPECT_TRUE(Exists(a));
}

TEST_F(CliHelpers, RegistryIsBounded) {
  std::vector<std::string> paths;
  for (size_t i = 0; i < sam::format::kMaxTempFiles; ++i) {
    paths.push_back((dir_ / ("t" + std::to_string(i))).string());
    ASSERT_TRUE(sam::format::RegisterTempFile(paths.back())) << i;
  }
  EXPECT_FALSE(sam::format::RegisterTempFile((dir_ / "one-too-many").string()));
  for (const auto& p : paths) sam::format::UnregisterTempFile(p);
  EXPECT_FALSE(sam::format::RegisterTempFile(std::string(sam::format::kMaxTempPathBytes, 'x')));
  EXPECT_FALSE(sam::format::RegisterTempFile(""));
  const std::string again = (dir_ / "again").string();
  EXPECT_TRUE(sam::format::RegisterTempFile(again));  // slots were freed
  sam::format::UnregisterTempFile(again);
}

TEST_F(CliHelpers, IndexWriterRegistersItsTemporaryFile) {
  const std::string out = (dir_ / "x.sam").string();
  const std::string temp = out + ".tmp-" + std::to_string(::getpid());
  {
    sam::format::IndexWriter writer(out);
    ASSERT_TRUE(Exists(temp));
    sam::format::RemoveRegisteredTempFiles();  // what the signal handler does
    EXPECT_FALSE(Exists(temp));
  }
  EXPECT_FALSE(Exists(out));
  // Destroyed, the writer unregistered it: a new file of that name is left alone.
  Touch("x.sam.tmp-" + std::to_string(::getpid()));
  sam::format::RemoveRegisteredTempFiles();
  EXPECT_TRUE(Exists(temp));
}

TEST_F(CliHelpers, AtomicOutputFileReplacesOnlyOnCommit) {
  const std::string out = Touch("out.txt", "old");
  {
    sam::tools::AtomicOutputFile file(out);
    file.stream() << "partial";
    EXPECT_TRUE(Exists(file.temp_path()));
    EXPECT_EQ(Read(out), "old");
  }  // no Commit: an error path
  EXPECT_EQ(Read(out), "old");
  EXPECT_FALSE(Exists(out + ".tmp-" + std::to_string(::getpid())));
  {
    sam::tools::AtomicOutputFile file(out);
    file.stream() << "new";
    file.Commit();
  }
  EXPECT_EQ(Read(out), "new");
  EXPECT_FALSE(Exists(out + ".tmp-" + std::to_string(::getpid())));
}

TEST_F(CliHelpers, CheckOutputPathRefusesWhatMustNotBeReplaced) {
  const std::string input = Touch("input.txt");
  const std::string link = (dir_ / "link").string(), hard = (dir_ / "hard").string();
  ASSERT_EQ(::symlink((dir_ / "target").c_str(), link.c_str()), 0);
  ASSERT_EQ(::link(input.c_str(), hard.c_str()), 0);
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  EXPECT_THROW(sam::tools::CheckOutputPath("-o", link), UsageError);
  EXPECT_THROW(sam::tools::CheckOutputPath("-o", (dir_ / "fifo").string()), UsageError);
  EXPECT_THROW(sam::tools::CheckOutputPath("-o", dir_.string()), UsageError);
  EXPECT_THROW(sam::tools::CheckOutputPath("-o", input, {input}), UsageError);
  EXPECT_THROW(sam::tools::CheckOutputPath("-o", hard, {input}), UsageError);
  EXPECT_THROW(sam::tools::CheckOutputPath("-o", (dir_ / "no/x").string()), UsageError);
  EXPECT_THROW(sam::tools::CheckOutputPath("-o", input + "/x"), UsageError);
  EXPECT_THROW(sam::tools::CheckOutputPath("-o", ""), UsageError);
  // Allowed: a new file, an existing regular file that is not an input.
  EXPECT_NO_THROW(sam::tools::CheckOutputPath("-o", (dir_ / "new").string(), {input}));
  EXPECT_NO_THROW(sam::tools::CheckOutputPath("-o", Touch("other"), {input}));
  EXPECT_FALSE(Exists((dir_ / "new").string()));  // the writability probe is gone
  EXPECT_FALSE(Exists((dir_ / "target").string()));
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 5u);  // input, link, hard, fifo, other: no probe left behind
}

}  // namespace
