// A temporary directory (mkdtemp under temp_directory_path(), so distinct per
// process and per object: ctest runs test binaries in parallel), removed with
// everything in it when the object goes out of scope.
//
//   sam::testing::TempDir dir("sam_format_test");
//   const std::filesystem::path file = dir.path() / "small.sam";
#ifndef SAM_TESTS_COMMON_TEMP_DIR_H_
#define SAM_TESTS_COMMON_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace sam::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "sam_test") {
    std::string pattern =
        (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace sam::testing

#endif  // SAM_TESTS_COMMON_TEMP_DIR_H_
