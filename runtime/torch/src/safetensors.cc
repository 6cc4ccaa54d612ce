#include "sam/torch/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "sam/format/file_checks.h"
#include "torch_errors.h"

namespace sam::torch_backend {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts are not supported");

// Headers larger than this are refused before parsing (the reference implementation uses the
// same bound); it keeps a corrupted length field from triggering a huge allocation.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

struct DtypeInfo {
  const char* name;
  torch::ScalarType type;
  uint64_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {"F64", torch::kFloat64, 8}, {"F32", torch::kFloat32, 4}, {"F16", torch::kFloat16, 2},
    {"BF16", torch::kBFloat16, 2}, {"I64", torch::kInt64, 8}, {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},   {"I8", torch::kInt8, 1},     {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1},
};

const DtypeInfo* FindDtype(const std::string& name) {
  for (const auto& info : kDtypes) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

[[noreturn]] void FormatError(const std::filesystem::path& path, const std::string& what) {
  throw Error(ErrorCode::kBadCheckpoint, {.file = path.string()}, what);
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

uint64_t ReadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses and bounds-checks one header entry.
SafetensorsEntry ParseEntry(const std::filesystem::path& path, const std::string& name,
                            const nlohmann::json& j, uint64_t data_size) {
  auto fail = [&](const std::string& what) { FormatError(path, "tensor '" + name + "': " + what); };
  if (!j.is_object()) fail("header entry is not a JSON object");
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!j.contains(field)) fail(std::string("field '") + field + "' is missing");
  }
  SafetensorsEntry e;
  if (!j["dtype"].is_string()) fail("field 'dtype' is not a string");
  e.dtype = j["dtype"].get<std::string>();
  const DtypeInfo* info = FindDtype(e.dtype);
  if (info == nullptr) {
    throw Error(ErrorCode::kDtype, "safetensors file '" + path.string() + "': tensor '" + name +
                                       "': unsupported dtype '" + e.dtype +
                                       "' (supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  }
  const auto& shape = j["shape"];
  if (!shape.is_array()) fail("field 'shape' is not an array");
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      fail("field 'shape' has an entry that is not a non-negative integer: " + d.dump());
    }
    const auto dim = d.get<uint64_t>();
    if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim) overflow = true;
    numel *= dim;
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  if (overflow || numel > std::numeric_limits<uint64_t>::max() / info->size) {
    fail("shape " + ShapeString(e.shape) + " overflows");
  }
  const auto& offsets = j["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    fail("field 'data_offsets' is not a pair of non-negative integers: " + offsets.dump());
  }
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.begin > e.end) {
    fail("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
         "] has begin > end");
  }
  if (e.end > data_size) {
    fail("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
         "] exceed the data region of " + std::to_string(data_size) + " bytes (file truncated?)");
  }
  if (e.end - e.begin != numel * info->size) {
    fail("data_offsets span " + std::to_string(e.end - e.begin) + " bytes but shape " +
         ShapeString(e.shape) + " of " + e.dtype + " needs " + std::to_string(numel * info->size));
  }
  return e;
}

}  // namespace

struct SafetensorsFile::Mapping {
  void* address = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (address != nullptr) munmap(address, size);
  }
};

SafetensorsFile SafetensorsFile::Open(const std::filesystem::path& path) {
  // Never blocks (a FIFO is refused); a directory is named as one.
  const int fd = internal::OpenRegularFile(path.string(), "safetensors file");
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(ErrorCode::kIo, "cannot stat '" + path.string() + "': " + std::strerror(err));
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    FormatError(path, "file is " + std::to_string(file_size) +
                          " bytes, shorter than the 8-byte header length (truncated)");
  }
  auto mapping = std::make_shared<Mapping>();
  // Private writable mapping: tensors handed out may be written to without touching the file.
  mapping->address = mmap(nullptr, file_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (mapping->address == MAP_FAILED) {
    mapping->address = nullptr;
    throw Error(ErrorCode::kIo, "cannot mmap '" + path.string() + "': " + std::strerror(map_err));
  }
  mapping->size = file_size;
  const auto* bytes = static_cast<const uint8_t*>(mapping->address);

  const uint64_t header_size = ReadLe64(bytes);
  if (header_size > kMaxHeaderBytes) {
    FormatError(path, "header length " + std::to_string(header_size) + " exceeds the limit of " +
                          std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (header_size > file_size - 8) {
    FormatError(path, "header length " + std::to_string(header_size) + " exceeds the " +
                          std::to_string(file_size - 8) +
                          " bytes after the length field (truncated)");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_size);
  } catch (const nlohmann::json::exception& e) {
    FormatError(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) FormatError(path, "header is not a JSON object");

  SafetensorsFile file;
  file.path_ = path;
  file.data_ = bytes + 8 + header_size;
  const uint64_t data_size = file_size - 8 - header_size;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) FormatError(path, "'__metadata__' is not a JSON object");
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) FormatError(path, "'__metadata__' value '" + key + "' is not a string");
        file.metadata_[key] = text.get<std::string>();
      }
      continue;
    }
    file.entries_.emplace(name, ParseEntry(path, name, value, data_size));
  }
  file.mapping_ = std::move(mapping);
  return file;
}

std::vector<std::string> SafetensorsFile::Names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

const SafetensorsEntry& SafetensorsFile::Entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    throw Error(ErrorCode::kMissingTensor,
                "safetensors file '" + path_.string() + "': tensor '" + name + "' is missing");
  }
  return it->second;
}

torch::Tensor SafetensorsFile::Get(const std::string& name) const {
  const SafetensorsEntry& e = Entry(name);
  const DtypeInfo* info = FindDtype(e.dtype);  // validated by Open()
  const auto options = torch::TensorOptions().dtype(info->type).device(torch::kCPU);
  auto* src = const_cast<uint8_t*>(data_ + e.begin);
  if (reinterpret_cast<uintptr_t>(src) % info->size == 0) {
    auto keep_alive = mapping_;
    return torch::from_blob(
        src, e.shape, [keep_alive](void*) mutable { keep_alive.reset(); }, options);
  }
  torch::Tensor out = torch::empty(e.shape, options);
  std::memcpy(out.data_ptr(), src, e.end - e.begin);
  return out;
}

std::string SafetensorsDtypeName(torch::ScalarType dtype) {
  for (const auto& info : kDtypes) {
    if (info.type == dtype) return info.name;
  }
  throw Error(ErrorCode::kDtype,
              std::string("torch dtype ") + c10::toString(dtype) + " has no safetensors equivalent here");
}

torch::ScalarType SafetensorsDtypeFromName(const std::string& name) {
  const DtypeInfo* info = FindDtype(name);
  if (info == nullptr) throw Error(ErrorCode::kDtype, "unsupported safetensors dtype '" + name + "'");
  return info->type;
}

void WriteSafetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> contiguous;
  contiguous.reserve(tensors.size());
  uint64_t offset = 0;
  std::set<std::string> seen;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__" || !seen.insert(name).second) {
      throw Error(ErrorCode::kInvalidArgument, "WriteSafetensors '" + path.string() +
                                                   "': duplicate or reserved tensor name '" + name + "'");
    }
    if (!tensor.defined()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "WriteSafetensors '" + path.string() + "': tensor '" + name + "' is undefined");
    }
    const std::string dtype = SafetensorsDtypeName(tensor.scalar_type());
    torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", dtype}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous.push_back(std::move(t));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(ErrorCode::kIo, "cannot create '" + tmp.string() + "'");
    uint8_t length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(uint64_t{text.size()} >> (8 * i));
    out.write(reinterpret_cast<const char*>(length), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : contiguous) {
      out.write(static_cast<const char*>(t.data_ptr()),
                static_cast<std::streamsize>(t.numel() * t.element_size()));
    }
    out.flush();
    if (!out) {
      out.close();
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      throw Error(ErrorCode::kIo, "write to '" + tmp.string() + "' failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw Error(ErrorCode::kIo, "cannot rename '" + tmp.string() + "' to '" + path.string() +
                                    "': " + ec.message());
  }
}

}  // namespace sam::torch_backend
