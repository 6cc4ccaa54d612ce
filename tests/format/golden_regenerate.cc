// Rewrites the golden index files from their descriptions:
//   format_golden_regenerate tests/format/golden
// (or `cmake --build build --target regenerate_golden`). Golden files
// change only with a format version change; see golden/README.md.
#include <zstd.h>

#include <exception>
#include <fstream>
#include <iostream>

#include "golden.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: format_golden_regenerate GOLDEN_DIR\n";
    return 2;
  }
  try {
    const std::filesystem::path dir = argv[1];
    const auto specs = sam::golden::GoldenSpecs(dir);
    if (specs.empty()) {
      std::cerr << "format_golden_regenerate: no *.json descriptions in " << dir << "\n";
      return 1;
    }
    for (const auto& json : specs) {
      const auto spec = sam::golden::LoadGoldenSpec(json);
      const auto out = dir / (spec.name + ".sam");
      sam::golden::BuildGolden(spec, out.string());
      std::cout << "wrote " << out.string() << " (" << std::filesystem::file_size(out)
                << " bytes)\n";
    }
    std::ofstream(dir / "ZSTD_VERSION") << ZSTD_versionString() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "format_golden_regenerate: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
