// Writing index files atomically.
//
//   sam::format::IndexWriter w("out.sam");          // creates out.sam.tmp-<pid>
//   w.AddSection("TEXT", text_bytes);                 // streamed to disk, page-aligned
//   ...
//   w.AddSection("META", json_bytes, /*compress=*/true);
//   w.Finish(header);                                 // table + header, fsync, rename
//
// Until Finish() succeeds the final path is untouched; a writer destroyed
// without Finish() (an exception, a crash) removes its temporary file, and a
// crash leaves only a temporary file whose magic marks it incomplete.
#ifndef SAM_FORMAT_WRITER_H_
#define SAM_FORMAT_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "sam/format/accelerators.h"
#include "sam/format/index.h"

namespace sam::format {

class IndexWriter {
 public:
  explicit IndexWriter(const std::string& path);
  // Writes into *memory instead of a file (resized to the index's bytes;
  // cleared on failure); `name` is used in messages. Finish() neither fsyncs
  // nor renames. The bytes open with IndexFile::FromBuffer once *memory is
  // 8-byte aligned (std::vector's allocation is).
  IndexWriter(std::vector<uint8_t>* memory, const std::string& name);
  ~IndexWriter();
  IndexWriter(const IndexWriter&) = delete;
  IndexWriter& operator=(const IndexWriter&) = delete;

  // Appends one section. Tags are four ASCII characters (FORMAT.md lists
  // them); compress selects zstd (only for cold sections).
  void AddSection(const std::string& tag, std::span<const uint8_t> bytes,
                  bool compress = false);
  // Writes the section table and the header (the fields that describe the
  // automaton come from header; versions, features, sizes are filled in),
  // fsyncs, renames to the final path and fsyncs the directory.
  void Finish(const IndexHeader& header);
  // Computes the accelerator sections (HUBS, FILT: sam/format/accelerators.h;
  // RECS when params.record_min_count > 0: sam/format/child_records.h; CLAB
  // when params.clone_labels)
  // from the sections written so far, which must be all the others, and
  // appends them. `header` is the one Finish() will get.
  void AddAccelerators(const IndexHeader& header, const AcceleratorParams& params);
  // Appends a section of another index file as it is stored there (a
  // compressed one is not compressed again).
  void CopySection(const SectionInfo& info, std::span<const uint8_t> stored);
  // Bytes written so far per section, for reports.
  const std::vector<SectionInfo>& sections() const { return sections_; }

 private:
  void WriteAt(uint64_t offset, const void* data, size_t size);
  // The header (its checksum included) and the section table for the
  // sections written so far.
  std::vector<uint8_t> HeadAndTable(const IndexHeader& header);
  void Abort() noexcept;

  std::string path_;
  std::string temp_path_;
  std::vector<uint8_t>* memory_ = nullptr;  // the memory mode's output
  int fd_ = -1;
  uint64_t end_ = 0;
  std::vector<SectionInfo> sections_;
  bool finished_ = false;
};

// Rewrites the index file at `path` with the accelerator sections (HUBS,
// FILT, RECS when params.record_min_count > 0, CLAB when
// params.clone_labels) computed with `params`,
// atomically (a temporary file renamed over it); every other section is
// carried over byte for byte. The file is verified first
// (IndexFile::Verify). Returns false, changing nothing, when the file
// already has them (HUBS, and RECS and CLAB when asked for). Throws
// FormatError.
bool AddAcceleratorsToFile(const std::string& path, const AcceleratorParams& params);

}  // namespace sam::format

#endif  // SAM_FORMAT_WRITER_H_
