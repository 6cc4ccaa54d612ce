// A temporary directory removed with everything in it at scope exit (tests).
#ifndef SAM_TESTS_TORCH_TEMP_DIR_H_
#define SAM_TESTS_TORCH_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace sam::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "sam_test") {
    std::string pattern =
        (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
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

#endif  // SAM_TESTS_TORCH_TEMP_DIR_H_
