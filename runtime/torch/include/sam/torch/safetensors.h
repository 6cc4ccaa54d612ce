// Reader and writer of the safetensors checkpoint format
// (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N, N bytes of
// JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then
// the raw little-endian tensor data; offsets are relative to the start of the data region.
//
//   auto file = sam::torch_backend::SafetensorsFile::Open("model.safetensors");
//   for (const auto& name : file.Names()) {
//     torch::Tensor t = file.Get(name);   // CPU tensor, shares the file mapping
//   }
//   sam::torch_backend::WriteSafetensors("out.safetensors", {{"w", torch::ones({2, 3})}});
//
// Open() checks every declared size before use: header length against the file size, each dtype,
// each shape (non-negative, no overflow), each [begin, end) inside the data region and equal to
// numel * element size. Any violation throws Error(kFormat) naming the file and the tensor/field.
// Thread safety: a SafetensorsFile is immutable after Open(); concurrent Get() calls are safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "sam/torch/error.h"

namespace sam::torch_backend {

// An ordered list of named tensors, as written to / read from a checkpoint.
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct SafetensorsEntry {
  std::string dtype;            // safetensors dtype string: "F32", "F16", "BF16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0;           // byte offsets into the data region, [begin, end)
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Maps the file read-only (copy-on-write private mapping) and validates the header.
  // Throws Error(kIo) if the file cannot be opened/mapped, Error(kFormat) if it is malformed.
  static SafetensorsFile Open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  // Tensor names, sorted.
  std::vector<std::string> Names() const;
  bool Contains(const std::string& name) const { return entries_.count(name) != 0; }
  // Throws Error(kMissingTensor) if absent.
  const SafetensorsEntry& Entry(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor as a CPU tensor of the file's dtype. Zero-copy when the data is suitably aligned
  // (the tensor then keeps the mapping alive), otherwise an owned copy. Writes to a zero-copy
  // tensor are private to this process (never reach the file). Supported dtypes: F64, F32, F16,
  // BF16, I64, I32, I16, I8, U8, BOOL. Throws Error(kMissingTensor) if absent.
  torch::Tensor Get(const std::string& name) const;

 private:
  struct Mapping;
  std::filesystem::path path_;
  std::shared_ptr<const Mapping> mapping_;
  const uint8_t* data_ = nullptr;  // start of the data region inside the mapping
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (any device; F64/F32/F16/BF16/I64/I32/I16/I8/U8/BOOL) in the given order, data
// contiguous, header padded with spaces to a multiple of 8 bytes. Writes `path` + ".tmp" first and
// renames it over `path`. Throws Error(kInvalidArgument) on duplicate or reserved names or an
// unsupported dtype, Error(kIo) on write failure.
void WriteSafetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// The safetensors dtype string for a torch dtype, and back. Throw Error(kDtype) if unsupported.
std::string SafetensorsDtypeName(torch::ScalarType dtype);
torch::ScalarType SafetensorsDtypeFromName(const std::string& name);

}  // namespace sam::torch_backend
