// Atomic index writing: sections are streamed to "<path>.tmp-<pid>" after a
// placeholder header whose magic marks the file incomplete; Finish() writes
// the section table and the real header last, fsyncs, renames over the final
// path and fsyncs the directory (KenLM's kMagicIncomplete / FinishFile).
#include "sam/format/writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <thread>

#include "layout.h"
#include "sam/format/accelerators.h"
#include "sam/format/child_records.h"
#include "sam/format/file_checks.h"
#include "sam/format/temp_files.h"

namespace sam::format {
namespace {

// The RECS image for `images`' hub tables, when params ask for records.
ChildRecordImage BuildRecords(const IndexView& view, const AcceleratorImages& images,
                              const AcceleratorParams& params) {
  if (params.record_min_count == 0) return {};
  const HubTables hubs = ParseHubTables(
      std::span<const uint8_t>(static_cast<const uint8_t*>(images.hubs.data()), images.hubs.size()),
      view, "child records");
  return BuildChildRecords(view, hubs, ChildRecordParams{params.record_min_count, params.top_k});
}

using namespace layout;

[[noreturn]] void Fail(ErrorCode code, const std::string& file, const std::string& what) {
  throw FormatError(code, ErrorContext{.file = file}, what);
}

std::string Errno() { return std::strerror(errno); }

}  // namespace

IndexWriter::IndexWriter(const std::string& path) : path_(path) {
  CheckOutputPath(path);  // never a device, FIFO, directory or symbolic link
  temp_path_ = path + ".tmp-" + std::to_string(::getpid());
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) Fail(ErrorCode::kIo, path, "cannot create " + temp_path_ + ": " + Errno());
  RegisterTempFile(temp_path_);  // a program's signal handler removes it (temp_files.h)
  uint8_t head[kHeaderSize] = {};
  std::memcpy(head, kMagicIncomplete, 8);
  try {
    WriteAt(0, head, sizeof(head));
  } catch (...) {
    Abort();
    throw;
  }
  end_ = kHeaderSize + kMaxSections * kSectionEntrySize;
}

IndexWriter::IndexWriter(std::vector<uint8_t>* memory, const std::string& name)
    : path_(name), memory_(memory) {
  if (memory_ == nullptr) Fail(ErrorCode::kInvalidArgument, name, "null output buffer");
  memory_->clear();
  uint8_t head[kHeaderSize] = {};
  std::memcpy(head, kMagicIncomplete, 8);
  WriteAt(0, head, sizeof(head));
  end_ = kHeaderSize + kMaxSections * kSectionEntrySize;
}

IndexWriter::~IndexWriter() {
  if (!finished_) Abort();
}

void IndexWriter::Abort() noexcept {
  if (memory_ != nullptr) {
    memory_->clear();
    return;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) {
    ::unlink(temp_path_.c_str());
    UnregisterTempFile(temp_path_);
  }
}

void IndexWriter::WriteAt(uint64_t offset, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (memory_ != nullptr) {
    if (memory_->size() < offset + size) memory_->resize(offset + size);
    if (size > 0) std::memcpy(memory_->data() + offset, p, size);
    return;
  }
  while (size > 0) {
    const ssize_t w = ::pwrite(fd_, p, size, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      Fail(ErrorCode::kIo, path_, "write failed: " + Errno());
    }
    p += w;
    offset += static_cast<uint64_t>(w);
    size -= static_cast<size_t>(w);
  }
}

void IndexWriter::AddSection(const std::string& tag, std::span<const uint8_t> bytes,
                             bool compress) {
  if (finished_ || (fd_ < 0 && memory_ == nullptr))
    Fail(ErrorCode::kInvalidArgument, path_, "writer is closed");
  // Only the sections of FORMAT.md, in its order, hot ones raw: the writer
  // never produces a file that the reader refuses.
  const SectionKind* kind = FindSectionKind(tag);
  if (!kind) Fail(ErrorCode::kInvalidArgument, path_, "unknown section tag '" + tag + "'");
  if (!sections_.empty() && FindSectionKind(sections_.back().tag) >= kind)
    Fail(ErrorCode::kInvalidArgument, path_,
         "section " + tag + " added after " + sections_.back().tag +
             " (sections are written in the order of FORMAT.md)");
  if (kind->hot && compress)
    Fail(ErrorCode::kInvalidArgument, path_, "section " + tag + " must be stored raw");
  SectionInfo s;
  s.tag = tag;
  s.raw_bytes = bytes.size();
  std::vector<uint8_t> packed;
  std::span<const uint8_t> stored = bytes;
  if (compress) {
    packed.resize(ZSTD_compressBound(bytes.size()));
    const size_t got = ZSTD_compress(packed.data(), packed.size(), bytes.data(), bytes.size(), 12);
    if (ZSTD_isError(got))
      Fail(ErrorCode::kCompression, path_,
           "section " + tag + ": zstd compression failed: " + ZSTD_getErrorName(got));
    packed.resize(got);
    stored = packed;
    s.codec = "zstd";
  } else {
    s.codec = "raw";
  }
  s.offset = compress ? AlignUp(end_, 8) : AlignUp(end_, kAlignment);
  s.stored_bytes = stored.size();
  s.checksum = XXH3_64bits(stored.data(), stored.size());
  WriteAt(s.offset, stored.data(), stored.size());
  end_ = s.offset + s.stored_bytes;
  sections_.push_back(s);
}

std::vector<uint8_t> IndexWriter::HeadAndTable(const IndexHeader& in) {
  for (const SectionKind& k : kSectionKinds) {
    bool present = false;
    for (const SectionInfo& s : sections_) present |= s.tag == k.tag;
    if (k.required && !present)
      Fail(ErrorCode::kInvalidArgument, path_,
           std::string("required section ") + k.tag + " was not written");
  }
  auto check_token_id = [&](const char* field, uint32_t id) {
    if (id != kNoToken && id >= in.vocab_size)
      Fail(ErrorCode::kInvalidArgument, path_,
           std::string(field) + " " + std::to_string(id) + " is not below the vocab size " +
               std::to_string(in.vocab_size));
  };
  check_token_id("BOS id", in.bos_id);
  check_token_id("EOS id", in.eos_id);
  const uint32_t nsec = static_cast<uint32_t>(sections_.size());
  std::vector<uint8_t> out(kHeaderSize + uint64_t{nsec} * kSectionEntrySize, 0);
  uint8_t* head = out.data();
  uint64_t optional = 0;
  for (uint32_t i = 0; i < nsec; ++i) {
    const SectionInfo& s = sections_[i];
    uint8_t* t = head + kHeaderSize + uint64_t{i} * kSectionEntrySize;
    Write32(t + kSecTag, TagValue(s.tag.c_str()));
    Write32(t + kSecCodec, s.codec == "zstd" ? kCodecZstd : kCodecRaw);
    const SectionKind& kind = *FindSectionKind(s.tag);
    Write32(t + kSecFlags, kind.required ? kSectionRequired : 0);
    Write64(t + kSecOffset, s.offset);
    Write64(t + kSecStored, s.stored_bytes);
    Write64(t + kSecRaw, s.raw_bytes);
    Write64(t + kSecChecksum, s.checksum);
    optional |= kind.optional_feature;
    sections_[i].required = kind.required;
  }
  std::memcpy(head + kOffMagic, kMagic, 8);
  Write16(head + kOffMajor, kMajorVersion);
  Write16(head + kOffMinor, kMinorVersion);
  Write32(head + kOffByteOrder, kByteOrderMark);
  Write64(head + kOffRequired, kFeatureAutomatonV1);
  Write64(head + kOffOptional, optional);
  Write64(head + kOffFileSize, end_);
  Write32(head + kOffHeaderSize, kHeaderSize);
  Write32(head + kOffSectionCount, nsec);
  Write32(head + kOffSectionTable, kHeaderSize);
  Write32(head + kOffAlignment, kAlignment);
  Write64(head + kOffNumTokens, in.num_tokens);
  Write64(head + kOffNumClones, in.num_clones);
  Write64(head + kOffNumStates, in.num_states);
  Write64(head + kOffNumEdges, in.num_edges);
  Write64(head + kOffNumDocuments, in.num_documents);
  Write64(head + kOffNumPrefixCounts, in.num_prefix_counts);
  Write32(head + kOffVocabSize, in.vocab_size);
  Write32(head + kOffSeparator, in.separator_id);
  Write32(head + kOffBos, in.bos_id);
  Write32(head + kOffEos, in.eos_id);
  head[kOffTokenWidth] = in.token_width;
  head[kOffStateWidth] = in.state_width;
  head[kOffPositionWidth] = in.position_width;
  head[kOffCloneLenWidth] = in.clone_len_width;
  head[kOffCountWidth] = in.count_width;
  head[kOffSelectWidth] = in.select_width;
  Write16(head + kOffSelectRateLog2, in.select_rate_log2);
  std::memcpy(head + kOffTokenizerSha, in.tokenizer_sha256.data(), 32);
  Write64(head + kOffHeaderChecksum, XXH3_64bits(out.data(), out.size()));
  return out;
}

void IndexWriter::AddAccelerators(const IndexHeader& header, const AcceleratorParams& params) {
  if (finished_ || (fd_ < 0 && memory_ == nullptr))
    Fail(ErrorCode::kInvalidArgument, path_, "writer is closed");
  // The automaton as written so far, read in place: its header and table
  // go into a private copy-on-write mapping of the temporary file (or into
  // the memory output, which Finish() rewrites), so that the sections are
  // computed from exactly the bytes the file holds.
  const std::vector<uint8_t> head = HeadAndTable(header);
  AcceleratorImages images;
  ChildRecordImage records;
  std::vector<uint8_t> labels;
  // The labels on another thread: one pass over the clones, beside the hub
  // tables' pass over the edges.
  auto compute = [&](const IndexView& view) {
    std::exception_ptr labels_error;
    std::thread labelling;
    if (params.clone_labels) {
      labelling = std::thread([&] {
        try {
          labels = BuildCloneLabels(view, header.token_width);
        } catch (...) {
          labels_error = std::current_exception();
        }
      });
    }
    try {
      images = BuildAccelerators(view, params);
      records = BuildRecords(view, images, params);
    } catch (...) {
      if (labelling.joinable()) labelling.join();
      throw;
    }
    if (labelling.joinable()) labelling.join();
    if (labels_error) std::rethrow_exception(labels_error);
  };
  if (memory_ != nullptr) {
    WriteAt(0, head.data(), head.size());
    memory_->resize(end_);
    compute(IndexFile::FromBuffer(memory_->data(), memory_->size(), path_).view());
  } else {
    const int fd = ::open(temp_path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) Fail(ErrorCode::kIo, path_, "cannot reopen " + temp_path_ + ": " + Errno());
    if (::ftruncate(fd_, static_cast<off_t>(end_)) != 0) {
      ::close(fd);
      Fail(ErrorCode::kIo, path_, "cannot size the file: " + Errno());
    }
    void* map = ::mmap(nullptr, end_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (map == MAP_FAILED)
      Fail(ErrorCode::kIo, path_, std::string("cannot map ") + temp_path_ + ": " + std::strerror(err));
    try {
      std::memcpy(map, head.data(), head.size());
      compute(IndexFile::FromBuffer(map, end_, path_).view());
    } catch (...) {
      ::munmap(map, end_);
      throw;
    }
    ::munmap(map, end_);
  }
  auto bytes = [](const HugeBuffer& b) {
    return std::span<const uint8_t>(static_cast<const uint8_t*>(b.data()), b.size());
  };
  AddSection("HUBS", bytes(images.hubs));
  if (images.filter.size() != 0) AddSection("FILT", bytes(images.filter));
  if (records.size != 0) AddSection("RECS", records.bytes());
  if (params.clone_labels) AddSection("CLAB", labels);
}

void IndexWriter::CopySection(const SectionInfo& info, std::span<const uint8_t> stored) {
  if (info.codec == "raw") {
    AddSection(info.tag, stored);
    return;
  }
  if (finished_ || (fd_ < 0 && memory_ == nullptr))
    Fail(ErrorCode::kInvalidArgument, path_, "writer is closed");
  const SectionKind* kind = FindSectionKind(info.tag);
  if (!kind || kind->hot || kind->mapped || info.codec != "zstd")
    Fail(ErrorCode::kInvalidArgument, path_, "section " + info.tag + " cannot be copied");
  if (!sections_.empty() && FindSectionKind(sections_.back().tag) >= kind)
    Fail(ErrorCode::kInvalidArgument, path_,
         "section " + info.tag + " added after " + sections_.back().tag);
  SectionInfo s;
  s.tag = info.tag;
  s.codec = "zstd";
  s.raw_bytes = info.raw_bytes;
  s.offset = AlignUp(end_, 8);
  s.stored_bytes = stored.size();
  s.checksum = XXH3_64bits(stored.data(), stored.size());
  WriteAt(s.offset, stored.data(), stored.size());
  end_ = s.offset + s.stored_bytes;
  sections_.push_back(s);
}

bool AddAcceleratorsToFile(const std::string& path, const AcceleratorParams& params) {
  OpenOptions verify;
  verify.verify = true;
  const IndexFile in = IndexFile::Open(path, verify);
  if (in.view().hubs().present() &&
      (params.record_min_count == 0 || in.view().child_records().present()) &&
      (!params.clone_labels || in.HasSection("CLAB")))
    return false;
  IndexWriter out(path);  // a temporary file renamed over `path` when complete
  for (const SectionInfo& s : in.sections()) {
    const SectionKind* kind = FindSectionKind(s.tag);
    if (kind == nullptr) continue;     // (an unknown optional section: not carried over)
    if (kind->accelerator) continue;  // computed again
    out.CopySection(s, in.StoredBytes(s));
  }
  out.AddAccelerators(in.header(), params);
  out.Finish(in.header());
  return true;
}

void IndexWriter::Finish(const IndexHeader& in) {
  if (finished_ || (fd_ < 0 && memory_ == nullptr))
    Fail(ErrorCode::kInvalidArgument, path_, "writer is closed");
  try {
    const std::vector<uint8_t> all = HeadAndTable(in);
    const std::vector<uint8_t> table(all.begin() + kHeaderSize, all.end());
    const uint8_t* head = all.data();

    if (memory_ != nullptr) {
      memory_->resize(end_);
      WriteAt(kHeaderSize, table.data(), table.size());
      WriteAt(0, head, kHeaderSize);
      finished_ = true;
      return;
    }
    if (::ftruncate(fd_, static_cast<off_t>(end_)) != 0)
      Fail(ErrorCode::kIo, path_, "cannot size the file: " + Errno());
    WriteAt(kHeaderSize, table.data(), table.size());
    if (::fsync(fd_) != 0) Fail(ErrorCode::kIo, path_, "fsync failed: " + Errno());
    WriteAt(0, head, kHeaderSize);  // the header last: only now is the file valid
    if (::fsync(fd_) != 0) Fail(ErrorCode::kIo, path_, "fsync failed: " + Errno());
    if (::close(fd_) != 0) {
      fd_ = -1;
      Fail(ErrorCode::kIo, path_, "close failed: " + Errno());
    }
    fd_ = -1;
    if (std::rename(temp_path_.c_str(), path_.c_str()) != 0)
      Fail(ErrorCode::kIo, path_, "cannot rename " + temp_path_ + ": " + Errno());
    finished_ = true;
    UnregisterTempFile(temp_path_);
    FsyncParentDirectory(path_);
  } catch (...) {
    if (!finished_) Abort();
    throw;
  }
}

}  // namespace sam::format
