// A corrupt index never hangs or crashes the runtime, whatever its checksums
// say.
//
// Checksums catch accidents, not a file whose checksums were recomputed after
// its contents changed. Each section of a test index (in the two kinds of
// FileKind: hub tables at min_degree 4, and at the C parameters) is
// overwritten in turn, whole or in part (Region), with zeros, ones, random
// bytes or its own two halves swapped, then re-sealed (section and header
// checksums recomputed, so that every checksum check passes), and:
//  (a) deep verify (IndexFile::Verify: sam-inspect --verify, SAM_OPEN_VERIFY)
//      refuses the file with a structural error whose message lists the
//      damaged section among the sections it read, then names the invariant;
//  (b) opened without verify, the file is either refused at open or drives
//      sessions (paper, tree and calibrated policies; the bare IndexView,
//      StaticIndexes that read the file's accelerator sections and child
//      records, one that computes its records, and the C API opened with
//      flags 0 and with SAM_OPEN_PREPARE) through many steps on random
//      streams, each returning a well-formed draft or an error. Damage to
//      sections that drafting never reads (META, VOCB, TEST) leaves every
//      draft as it was.
// The child records (RECS) are read unchecked after an O(1) open, so they
// are also damaged value by value, each change re-sealed so that the file
// still opens: offsets, heads, entries, links between records, the
// positions' link records and a hub's label-table range.
// A hang fails the test through its CTest TIMEOUT; nothing here is timed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sam/format/error.h"
#include "sam/format/index.h"
#include "sam/automaton/builder.h"
#include "sam/runtime/session.h"
#include "sam/runtime/static_index.h"
#include "sam/runtime/static_match.h"
#include "sam/sam.h"
#include "reseal.h"
#include "test_index.h"

namespace sam::runtime {
namespace {

using Bytes = std::vector<uint8_t>;
using test_util::TempPath;
using test_util::Text;

constexpr uint32_t kVocab = 24;

// The two files the harness damages: both carry every section (hub tables,
// edge filter and child records at record_min_count 2, top_k 8, 10 filter
// bits per edge) and differ in the hub threshold:
//  - min_degree 4 (kLowDegree): many hubs, read by the C++ StaticIndexes
//    below; a C open, whose min_degree is 32, cannot take them, so C drafts
//    from the bare view (flags 0) or computes its own tables (PREPARE);
//  - min_degree 32 (kCDefaults): the parameters sam-build writes and a C open
//    takes, so that C sessions opened with flags 0 draft from the file's
//    own (damaged) sections. Its vocabulary is larger, for states of 32
//    transitions and more.
struct FileKind {
  const char* name;
  uint32_t vocab;
  uint64_t min_degree;
};
constexpr FileKind kLowDegree{"hubs_at_4", kVocab, 4};
constexpr FileKind kCDefaults{"c_defaults", 40, 32};
void PrintTo(const FileKind& kind, std::ostream* os) { *os << kind.name; }

// FORMAT.md sections 2 and 3: the header's section count and state width, and
// each table entry's tag, offset and size. Checksums are recomputed with
// sam::testing::Reseal (tests/common/reseal.h).
constexpr size_t kHeaderBytes = 256, kEntryBytes = 64;
constexpr size_t kSectionCountAt = 44, kStateWidthAt = 121;
constexpr size_t kTagAt = 0, kOffsetAt = 16, kSizeAt = 24;

template <typename T>
T Load(const Bytes& b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof(v));
  return v;
}

struct Section {
  std::string tag;
  size_t entry = 0;  // table entry offset
  uint64_t offset = 0, size = 0;
};

std::vector<Section> SectionsOf(const Bytes& b) {
  std::vector<Section> out;
  const uint32_t count = Load<uint32_t>(b, kSectionCountAt);
  for (uint32_t i = 0; i < count; ++i) {
    Section s;
    s.entry = kHeaderBytes + i * kEntryBytes;
    s.tag.assign(reinterpret_cast<const char*>(b.data() + s.entry + kTagAt), 4);
    s.offset = Load<uint64_t>(b, s.entry + kOffsetAt);
    s.size = Load<uint64_t>(b, s.entry + kSizeAt);
    out.push_back(s);
  }
  return out;
}

const Section& Find(const std::vector<Section>& sections, const std::string& tag) {
  for (const Section& s : sections)
    if (s.tag == tag) return s;
  throw std::logic_error("no section " + tag);
}

enum class Damage { kZeros, kOnes, kRandom, kSwapHalves };
constexpr Damage kDamages[] = {Damage::kZeros, Damage::kOnes, Damage::kRandom, Damage::kSwapHalves};
const char* Name(Damage d) {
  switch (d) {
    case Damage::kZeros:
      return "zeros";
    case Damage::kOnes:
      return "ones";
    case Damage::kRandom:
      return "random bytes";
    case Damage::kSwapHalves:
      return "swapped halves";
  }
  return "?";
}

// Where the damage goes: the whole section; all of it but its first and
// last 16 bytes (interior); all of it but its first 64 bytes and last 16
// (body); or one quarter of the body. Opening reads a few values at both
// ends of a section (and its zero padding at the end), so whole-section
// damage is mostly refused there; interior damage passes those checks and
// reaches the sessions, except in the drafting sections (HUBS, FILT, RECS),
// whose 64-byte heads opening checks against the automaton: body damage
// leaves their heads. A quarter leaves the rest of the body too, so that
// the arrays it does not reach still lead to the one it damages (a hub
// table's entries to its children lists, say).
enum class Region { kWhole, kInterior, kBody, kQuarter1, kQuarter2, kQuarter3, kQuarter4 };
constexpr Region kRegions[] = {Region::kWhole,    Region::kInterior, Region::kBody,
                               Region::kQuarter1, Region::kQuarter2, Region::kQuarter3,
                               Region::kQuarter4};
constexpr uint64_t kEdgeBytes = 16, kHeadBytes = 64;

const char* Name(Region r) {
  static constexpr const char* kNames[] = {"",
                                           " interior",
                                           " body",
                                           " body quarter 1",
                                           " body quarter 2",
                                           " body quarter 3",
                                           " body quarter 4"};
  return kNames[static_cast<size_t>(r)];
}

// The bytes [first, first + second) of a section of `size` bytes that
// region r damages.
std::pair<uint64_t, uint64_t> Part(Region r, uint64_t size) {
  if (r == Region::kWhole) return {0, size};
  if (r == Region::kInterior) {
    const uint64_t skip = std::min(kEdgeBytes, size / 2);
    return {skip, size - 2 * skip};
  }
  const uint64_t front = std::min(kHeadBytes, size / 2);
  const uint64_t body = size - front - std::min(kEdgeBytes, size - front);
  if (r == Region::kBody) return {front, body};
  const uint64_t q = static_cast<uint64_t>(r) - static_cast<uint64_t>(Region::kQuarter1);
  const uint64_t begin = body * q / 4, end = body * (q + 1) / 4;
  return {front + begin, end - begin};
}

// Overwrites p[0, size) with damage d.
void Apply(uint8_t* p, uint64_t size, Damage d, std::mt19937_64& rng) {
  switch (d) {
    case Damage::kZeros:
      std::fill(p, p + size, 0);
      break;
    case Damage::kOnes:
      std::fill(p, p + size, 0xFF);
      break;
    case Damage::kRandom:
      for (uint64_t i = 0; i < size; ++i) p[i] = static_cast<uint8_t>(rng());
      break;
    case Damage::kSwapHalves:
      std::swap_ranges(p, p + size / 2, p + size - size / 2);
      break;
  }
}

Bytes Damaged(const Bytes& original, const Section& s, Region region, Damage d,
              std::mt19937_64& rng) {
  Bytes b = original;
  const auto [first, length] = Part(region, s.size);
  Apply(b.data() + s.offset + first, length, d, rng);
  sam::testing::Reseal(b.data(), b.size());
  return b;
}

void WriteFile(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

Bytes ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

// Documents with shared phrases (long matches, clones, states of many
// transitions), a vocabulary (VOCB), self-test samples (TEST), the
// accelerator sections (HUBS, FILT, CLAB) and child records (RECS).
struct Corpus {
  std::vector<Text> docs;
  Bytes bytes;
};

Corpus BuildCorpus(const std::string& path, const FileKind& kind = kLowDegree) {
  const uint32_t vocab = kind.vocab;
  std::mt19937 rng(8);
  Corpus c;
  Text phrase(25);
  for (auto& t : phrase) t = rng() % vocab;
  for (int d = 0; d < 50; ++d) {
    Text doc;
    while (doc.size() < 40) {
      if (rng() % 4 == 0) {
        const size_t from = rng() % phrase.size();
        doc.insert(doc.end(), phrase.begin() + from,
                   phrase.begin() + std::min<size_t>(phrase.size(), from + 8));
      } else {
        doc.push_back(rng() % 3 == 0 ? rng() % 4 : rng() % vocab);
      }
    }
    c.docs.push_back(doc);
  }
  automaton::IndexInfo info;
  for (uint32_t t = 0; t < vocab; ++t) info.vocabulary.push_back(std::string("t").append(std::to_string(t)));
  // The accelerator sections and child records with the parameters the
  // sessions below use, so that they read the file's tables and records
  // (damaged ones included).
  info.accelerators = format::AcceleratorParams{.min_degree = static_cast<uint32_t>(kind.min_degree),
                                                .top_k = 8,
                                                .filter_bits_per_edge = 10,
                                                .record_min_count = 2};
  automaton::BuildIndexFile(c.docs, vocab, path, info);
  c.bytes = ReadFile(path);
  return c;
}

// Streams: stretches of the documents with random tokens between them.
Text Stream(const std::vector<Text>& docs, uint32_t vocab, std::mt19937& rng, size_t length) {
  Text s;
  while (s.size() < length) {
    if (rng() % 3 == 0) {
      s.push_back(rng() % vocab);
    } else {
      const Text& d = docs[rng() % docs.size()];
      const size_t from = rng() % d.size();
      s.insert(s.end(), d.begin() + from, d.begin() + std::min(d.size(), from + 1 + rng() % 12));
    }
  }
  return s;
}

std::string Malformed(const uint32_t* tokens, const int32_t* parents, const uint16_t* depths,
                      size_t count, uint32_t start, uint32_t vocab, size_t budget) {
  return test_util::MalformedDraft(tokens, parents, depths, count, start, vocab, budget);
}

constexpr Policy kPolicies[] = {Policy::kPaper, Policy::kTree, Policy::kCalibrated};
constexpr sam_policy kCPolicies[] = {SAM_POLICY_PAPER, SAM_POLICY_TREE, SAM_POLICY_CALIBRATED};

size_t Budget(Policy p) {
  const SessionOptions o;
  return p == Policy::kTree ? o.tree.nodes : o.draft_size;
}

// What a run drafted: every draft's tokens, in order.
using Drafts = std::vector<Text>;

struct Workload {
  uint32_t vocab;
  Text prompt;
  Text stream;
};

std::vector<Workload> Workloads(const std::vector<Text>& docs, uint32_t vocab = kVocab) {
  std::mt19937 rng(21);
  std::vector<Workload> w(3);
  for (Workload& x : w) {
    x.vocab = vocab;
    x.prompt = Stream(docs, vocab, rng, 30);
    x.stream = Stream(docs, vocab, rng, 300);
  }
  return w;
}

// Each step proposes a draft rooted at the next stream token, accepts the
// longest path the stream continues and commits the start token and it.
Drafts Drive(Session& s, Policy policy, const Workload& w, std::string* error) {
  Drafts drafts;
  s.Reset();
  s.Prefill(w.prompt);
  for (size_t pos = 0; pos < w.stream.size();) {
    const DraftTree& t = s.Propose(w.stream[pos]);
    const std::string bad = Malformed(t.tokens.data(), t.parents.data(), t.depths.data(), t.size(),
                                      w.stream[pos], w.vocab, Budget(policy));
    if (!bad.empty()) {
      *error = "step at " + std::to_string(pos) + ": " + bad;
      return drafts;
    }
    drafts.push_back(t.tokens);
    Text commit{w.stream[pos]};
    for (int node = 0; pos + commit.size() < w.stream.size();) {
      node = t.Child(node, w.stream[pos + commit.size()]);
      if (node < 0) break;
      commit.push_back(w.stream[pos + commit.size()]);
    }
    s.Commit(commit);
    pos += commit.size();
  }
  return drafts;
}

// The same through the C API; a failed call ends the run (an error is an
// acceptable answer for a corrupt index; it must carry a message).
Drafts DriveC(sam_index* index, sam_policy policy, const Workload& w, std::string* error) {
  Drafts drafts;
  sam_session_config o;
  sam_session_config_init(&o);
  o.policy = policy;
  o.max_dynamic_bytes = 1 << 20;
  sam_session* s = nullptr;
  if (sam_session_new(&o, &s) != SAM_OK || sam_session_attach_index(s, index) != SAM_OK ||
      sam_session_prefill(s, w.prompt.data(), w.prompt.size()) != SAM_OK) {
    *error = std::string("session setup failed: ") + sam_last_error();
    sam_session_free(s);
    return drafts;
  }
  const Policy p = policy == SAM_POLICY_TREE ? Policy::kTree : Policy::kPaper;
  for (size_t pos = 0; pos < w.stream.size();) {
    sam_draft d;
    const int status = sam_session_propose(s, w.stream[pos], 0, &d);
    if (status != SAM_OK) {
      if (std::string(sam_last_error()).empty()) *error = "an error without a message";
      break;
    }
    const std::string bad =
        Malformed(d.tokens, d.parents, d.depths, d.count, w.stream[pos], w.vocab, Budget(p));
    if (!bad.empty()) {
      *error = "C API step at " + std::to_string(pos) + ": " + bad;
      break;
    }
    drafts.emplace_back(d.tokens, d.tokens + d.count);
    Text commit{w.stream[pos]};
    for (int node = 0; pos + commit.size() < w.stream.size();) {
      int next = -1;
      for (size_t i = node + 1; i < d.count; ++i)
        if (d.parents[i] == node && d.tokens[i] == w.stream[pos + commit.size()]) {
          next = static_cast<int>(i);
          break;
        }
      if (next < 0) break;
      node = next;
      commit.push_back(w.stream[pos + commit.size()]);
    }
    if (sam_session_commit(s, commit.data(), commit.size()) != SAM_OK) {
      if (std::string(sam_last_error()).empty()) *error = "an error without a message";
      break;
    }
    pos += commit.size();
  }
  sam_session_free(s);
  return drafts;
}

// What DriveEverything met.
struct Driven {
  bool opened = false;             // the file opened without verify
  bool records_from_file = false;  // the default StaticIndex took the file's RECS
  // Steps of the sessions over that StaticIndex, per policy (kPolicies).
  size_t file_record_steps[std::size(kPolicies)] = {};
  // The C open with flags 0 opened, and drafted from the file's own hub
  // tables and filter (sam_index_accelerators: SAM_INDEX_HUB_TABLES, not
  // SAM_INDEX_COMPUTED), and from its child records.
  bool c_opened = false, c_file_tables = false, c_file_records = false;
};

// StaticIndex options over a test index of `kind` (at its min_degree): the
// defaults otherwise, which take the file's hub tables, edge filter and
// child records; top_k 4, which takes its hub tables and filter but not its
// records (they hold 8 children) and computes none; record_min_count 3,
// which computes records from the automaton (the file's are at 2).
struct VariantOptions {
  StaticIndex::Options file_records, no_records, computed_records;
};
VariantOptions OptionsFor(const FileKind& kind) {
  return VariantOptions{{.min_degree = kind.min_degree},
                        {.min_degree = kind.min_degree, .top_k = 4},
                        {.min_degree = kind.min_degree, .record_min_count = 3}};
}

// The C opens: flags 0 (the file's own sections when they were built with
// the C parameters, else the bare view) and SAM_OPEN_PREPARE (which computes
// what the file lacks at those parameters).
constexpr unsigned kCOpenFlags[] = {0, SAM_OPEN_PREPARE};

// Every run over the index at `path` (a file of `kind`), opened without
// verify: per policy and workload, the bare view, then a StaticIndex with
// each of OptionsFor(kind); then the C API with each of kCOpenFlags. Appends
// what each drafted to *all (empty runs where the file was refused at open).
Driven DriveEverything(const std::string& path, const FileKind& kind,
                       const std::vector<Workload>& workloads, std::vector<Drafts>* all,
                       std::string* error) {
  Driven driven;
  std::unique_ptr<format::IndexFile> file;
  std::shared_ptr<const StaticIndex> indexes[3];
  try {
    const VariantOptions options = OptionsFor(kind);
    file = std::make_unique<format::IndexFile>(format::IndexFile::Open(path));
    indexes[0] = StaticIndex::Create(&file->view(), options.file_records);
    indexes[1] = StaticIndex::Create(&file->view(), options.no_records);
    indexes[2] = StaticIndex::Create(&file->view(), options.computed_records);
    driven.opened = true;
    driven.records_from_file = indexes[0]->records_from_file();
  } catch (const format::FormatError&) {
    file.reset();  // refused at open: an error, as allowed
  }
  for (size_t p = 0; p < std::size(kPolicies); ++p) {
    SessionOptions o;
    o.max_dynamic_bytes = 1 << 20;
    o.policy = kPolicies[p];
    for (int variant = 0; variant < 4; ++variant) {
      Session s(o);
      if (file && variant == 0)
        s.AttachIndex(&file->view());
      else if (file)
        s.AttachIndex(indexes[variant - 1]);
      for (const Workload& w : workloads) {
        all->push_back(file ? Drive(s, kPolicies[p], w, error) : Drafts{});
        if (variant == 1) driven.file_record_steps[p] += all->back().size();
        if (!error->empty()) return driven;
      }
    }
  }
  for (unsigned flags : kCOpenFlags) {
    sam_index* index = nullptr;
    const int status = sam_index_open(path.c_str(), nullptr, flags, &index);
    if (status != SAM_OK && std::string(sam_last_error()).empty()) *error = "open: no message";
    if (status == SAM_OK && flags == 0) {
      const unsigned bits = sam_index_accelerators(index);
      driven.c_opened = true;
      driven.c_file_tables = (bits & SAM_INDEX_HUB_TABLES) != 0 && (bits & SAM_INDEX_COMPUTED) == 0;
      driven.c_file_records = driven.c_file_tables && (bits & SAM_INDEX_CHILD_RECORDS) != 0;
    }
    for (sam_policy p : kCPolicies)
      for (const Workload& w : workloads) {
        all->push_back(status == SAM_OK ? DriveC(index, p, w, error) : Drafts{});
        if (!error->empty()) break;
      }
    sam_index_close(index);
    if (!error->empty()) break;
  }
  return driven;
}

// The sections (of the comma-separated list that follows the path in a
// structural error's message) that a failed check read.
std::string SectionsNamed(const std::string& message, const std::string& path) {
  if (message.rfind(path + ": ", 0) != 0) return "";
  const std::string rest = message.substr(path.size() + 2);
  return rest.substr(0, rest.find(": "));
}

bool Lists(const std::string& sections, const std::string& tag) {
  return sections.find(tag) != std::string::npos;
}

// The two damage tests run over each kind of file (FileKind).
class CorruptIndexFile : public ::testing::TestWithParam<FileKind> {};

std::string KindName(const ::testing::TestParamInfo<FileKind>& info) { return info.param.name; }

// The intact file of `kind`: the C open with flags 0 drafts from the file's
// own sections at the C parameters, and from the bare view otherwise.
void ExpectCOpenOfIntact(const FileKind& kind, const Driven& driven) {
  ASSERT_TRUE(driven.c_opened);
  if (kind.min_degree == StaticIndex::Options{}.min_degree) {
    EXPECT_TRUE(driven.c_file_tables && driven.c_file_records)
        << "a C open of the intact file does not take its sections";
  } else {
    EXPECT_FALSE(driven.c_file_tables);
  }
}

TEST_P(CorruptIndexFile, EverySectionResealedWithDamageIsRefusedByVerifyAndNeverHangsASession) {
  const FileKind kind = GetParam();
  const std::string original_path = TempPath(std::string(kind.name) + "_corrupt_original.sam");
  const Corpus corpus = BuildCorpus(original_path, kind);
  const std::vector<Section> sections = SectionsOf(corpus.bytes);
  ASSERT_EQ(sections.size(), 17u)
      << "expected every section, VOCB, TEST, HUBS, FILT, RECS and CLAB included";
  const std::vector<Workload> workloads = Workloads(corpus.docs, kind.vocab);
  const VariantOptions options = OptionsFor(kind);

  // The intact index: verify accepts it, and the harness reaches static drafts
  // through the file's accelerators and records, and through none.
  format::OpenOptions verify;
  verify.verify = true;
  ASSERT_NO_THROW(format::IndexFile::Open(original_path, verify));
  {
    const format::IndexFile f = format::IndexFile::Open(original_path);
    const auto file_records = StaticIndex::Create(&f.view(), options.file_records);
    ASSERT_TRUE(file_records->accelerators_from_file());
    ASSERT_GT(file_records->num_hubs(), 0u);
    ASSERT_TRUE(file_records->records_from_file());
    const auto no_records = StaticIndex::Create(&f.view(), options.no_records);
    ASSERT_TRUE(no_records->accelerators_from_file());
    ASSERT_FALSE(no_records->has_records());
    const auto computed = StaticIndex::Create(&f.view(), options.computed_records);
    ASSERT_TRUE(computed->has_records());
    ASSERT_FALSE(computed->records_from_file());
  }
  std::vector<Drafts> intact;
  std::string error;
  const Driven driven_intact = DriveEverything(original_path, kind, workloads, &intact, &error);
  ASSERT_EQ(error, "");
  ASSERT_TRUE(driven_intact.records_from_file);
  ExpectCOpenOfIntact(kind, driven_intact);
  size_t long_drafts = 0;
  for (const Drafts& run : intact)
    for (const Text& d : run) long_drafts += d.size() > 3;
  ASSERT_GT(long_drafts, 100u);

  std::mt19937_64 rng(99);
  const std::string path = TempPath(std::string(kind.name) + "_corrupt_resealed.sam");
  size_t checked = 0, opened = 0;
  // Damaged files of each drafting section that the C open with flags 0
  // drafted from through the file's own sections.
  std::map<std::string, size_t> c_file_sections;
  for (const Section& section : sections) {
    for (Region region : kRegions) {
      // The cold sections are zstd frames, which interior damage already
      // reaches; their bodies are not parsed in parts.
      const bool cold = section.tag == "META" || section.tag == "VOCB" || section.tag == "TEST";
      if (cold && region > Region::kInterior) continue;
      for (Damage damage : kDamages) {
        const Bytes bytes = Damaged(corpus.bytes, section, region, damage, rng);
        const std::string what =
            section.tag + Name(region) + " with " + Name(damage);
        if (bytes == corpus.bytes) {
          // Skipped: the damage left the file as it was (zeros over a section
          // that holds only zero padding, such as an empty NCNT; swapped halves
          // of a part whose halves are equal), so there is nothing to find.
          std::printf("skipped %s: unchanged\n", what.c_str());
          continue;
        }
        ++checked;
        WriteFile(path, bytes);
        // (a) Deep verify refuses it, naming the section and the invariant.
        try {
          format::IndexFile::Open(path, verify);
          ADD_FAILURE() << what << ": verify accepted the file";
        } catch (const format::FormatError& e) {
          const std::string message = e.what();
          EXPECT_NE(e.code(), format::ErrorCode::kChecksumMismatch) << what << ": " << message;
          EXPECT_TRUE(Lists(SectionsNamed(message, path), section.tag)) << what << ": " << message;
          EXPECT_GT(message.size(), path.size() + section.tag.size() + 20)
              << what << ": " << message;
          std::printf("%s: %s\n", what.c_str(), message.c_str() + path.size() + 2);
        }
        // (b) Without verify: refused at open, or sessions finish every step.
        std::vector<Drafts> runs;
        error.clear();
        const Driven driven = DriveEverything(path, kind, workloads, &runs, &error);
        opened += driven.opened;
        c_file_sections[section.tag] += driven.c_file_tables;
        EXPECT_EQ(error, "") << what;
        if (driven.opened) {  // the defaults read the file's records, damaged ones included
          EXPECT_TRUE(driven.records_from_file) << what;
        }
        if (section.tag == "META" || section.tag == "VOCB" || section.tag == "TEST") {
          EXPECT_TRUE(runs == intact) << what << ": drafting does not read this section";
        }
      }
    }
  }
  std::printf("%zu damaged files, %zu of them opened without verify and drafted from\n", checked,
              opened);
  EXPECT_GE(checked, 17u * 7);
  EXPECT_GE(opened, 17u * 2);  // the sessions did meet damaged indexes
  if (driven_intact.c_file_tables) {
    // ... and so did C sessions opened with flags 0, through each drafting
    // section of the file.
    for (const char* tag : {"HUBS", "FILT", "RECS"}) {
      std::printf("%s: %zu damaged files drafted from by a C open with flags 0\n", tag,
                  c_file_sections[tag]);
      EXPECT_GE(c_file_sections[tag], 2u) << tag;
    }
  }
  std::remove(path.c_str());
  std::remove(original_path.c_str());
}

// The RECS section of a test file (sam/format/child_records.h): a 64-byte
// head (u32 version, min count, top k, flags; u64 clones, slots,
// positions), then record_begin (clones + 1 u32), the 16-byte slots (a
// head: len, count, link_record, bits; an entry: token, target, count,
// record) and position_link_record (positions u32), each array starting
// at a multiple of 64 bytes.
struct Recs {
  uint64_t clones = 0, slots = 0, positions = 0;
  uint64_t begin_at = 0, slots_at = 0, links_at = 0, end_at = 0;  // file offsets
  std::vector<uint32_t> heads;  // the slot of every record's head, in slot order

  explicit Recs(const Bytes& b) {
    const Section s = Find(SectionsOf(b), "RECS");  // a copy: the list is a temporary
    clones = Load<uint64_t>(b, s.offset + 16);
    slots = Load<uint64_t>(b, s.offset + 24);
    positions = Load<uint64_t>(b, s.offset + 32);
    auto round64 = [](uint64_t v) { return (v + 63) / 64 * 64; };
    begin_at = s.offset + 64;
    slots_at = begin_at + round64((clones + 1) * 4);
    links_at = slots_at + round64(slots * 16);
    end_at = links_at + positions * 4;
    for (uint64_t k = 0; k < clones; ++k)
      if (Begin(b, k) < Begin(b, k + 1)) heads.push_back(Begin(b, k));
    std::sort(heads.begin(), heads.end());
  }
  uint64_t BeginAt(uint64_t k) const { return begin_at + 4 * k; }
  // Field f (0..3) of slot i.
  uint64_t FieldAt(uint64_t i, unsigned f) const { return slots_at + 16 * i + 4 * f; }
  uint64_t LinkAt(uint64_t p) const { return links_at + 4 * p; }
  uint32_t Begin(const Bytes& b, uint64_t k) const { return Load<uint32_t>(b, BeginAt(k)); }
  uint32_t Field(const Bytes& b, uint64_t i, unsigned f) const {
    return Load<uint32_t>(b, FieldAt(i, f));
  }
  static uint32_t Size(uint32_t bits) { return bits & 0xff; }
  static bool Hub(uint32_t bits) { return (bits >> 8 & 1) != 0; }
};
enum : unsigned { kLen = 0, kCount = 1, kLinkRecord = 2, kBits = 3 };            // head fields
enum : unsigned { kToken = 0, kTarget = 1, kEntryCount = 2, kEntryRecord = 3 };  // entry fields

void Store32(Bytes& b, uint64_t at, uint32_t v) { std::memcpy(b.data() + at, &v, sizeof(v)); }

// Reads every record of `index` through its accessors: each slot as a
// head (and the entries it announces), each state's record children and
// transitions, each position's link record, and a transfer from every
// state on every token, given the state's record or another slot. Returns
// what was out of range ("" when nothing): whatever the slots hold, what
// the accessors give must be usable.
std::string SweepRecords(const StaticIndex& index) {
  const format::IndexView& view = index.view();
  const uint64_t states = view.num_states(), slots = view.child_records().num_slots;
  const uint32_t vocab = view.vocab_size();
  auto bad_state = [&](uint64_t v) { return v != format::kNoState && v >= states; };
  auto bad_child = [&](uint32_t token, uint64_t target) {
    return token >= vocab || target == format::kRoot || target >= states;
  };
  for (uint64_t r = 0; r < slots + 2; ++r) {
    const StaticIndex::RecordHead h = index.Head(static_cast<uint32_t>(r));
    if (h.size() > index.options().top_k) return "slot " + std::to_string(r) + ": size";
    const StaticIndex::RecordEntry* e = index.Entries(static_cast<uint32_t>(r));
    // Entries are checked where they are read: every one that passes may be used.
    for (uint32_t i = 0; i < h.size(); ++i)
      if (index.EntryOk(e[i], h) && bad_child(e[i].token, e[i].target))
        return "slot " + std::to_string(r) + ": entry";
  }
  for (uint64_t p = 0; p <= view.num_tokens() + 1; ++p) index.Head(index.PositionLinkRecord(p));
  std::vector<StaticIndex::Child> scratch;
  for (uint64_t v = 0; v < states; ++v) {
    for (const StaticIndex::Child& c : index.RecordChildren(v, &scratch))
      if (bad_child(c.token, c.target)) return "state " + std::to_string(v) + ": record child";
    const uint32_t records[] = {index.RecordOf(v), static_cast<uint32_t>(v % (slots + 1))};
    for (uint32_t c = 0; c < vocab; ++c) {
      if (bad_state(index.Next(v, c))) return "state " + std::to_string(v) + ": Next";
      for (uint32_t record : records) {
        uint32_t record_out = 0;
        const StaticMatch m =
            TransferByRecords(index, StaticMatch{v, view.Len(v)}, record, c, &record_out);
        if (m.state >= states) return "state " + std::to_string(v) + ": transfer";
        index.Head(record_out);
      }
    }
  }
  return "";
}

// Child records damaged value by value, each change re-sealed: the file
// opens (RECS is parsed in O(1) there, its contents unread), the runtime
// takes the damaged records (records_from_file()), and:
//  - deep verify refuses the file, naming RECS (it rebuilds the records and
//    compares them);
//  - without verify, every accessor of StaticIndex over every record, state,
//    token and position gives values in range (SweepRecords), and sessions
//    of every policy over the file's records (and the other variants of
//    DriveEverything) run every step of their streams with well-formed
//    drafts: StaticIndex bounds each record head it reads (StaticIndex::Head)
//    and each entry before it is used (StaticIndex::EntryOk),
//    matching stops where a record's length does not shorten the match, and
//    a draft tree is bounded by its budget. On the file at the C parameters,
//    C sessions opened with flags 0 draft from the damaged records too.
// A hang fails the test through its CTest TIMEOUT.
TEST_P(CorruptIndexFile, DamagedChildRecordsAreRefusedByVerifyAndNeverHangASession) {
  const FileKind kind = GetParam();
  const std::string original_path = TempPath(std::string(kind.name) + "_recs_original.sam");
  const Corpus corpus = BuildCorpus(original_path, kind);
  const Bytes& intact_bytes = corpus.bytes;
  const std::vector<Workload> workloads = Workloads(corpus.docs, kind.vocab);
  const VariantOptions options = OptionsFor(kind);
  const format::IndexFile original = format::IndexFile::Open(original_path);
  const format::IndexView& view = original.view();
  const Recs recs(intact_bytes);
  const uint32_t top_k = view.child_records().top_k;
  ASSERT_EQ(recs.clones, view.num_clones());
  ASSERT_EQ(recs.slots, view.child_records().num_slots);
  const Section recs_section = Find(SectionsOf(intact_bytes), "RECS");
  ASSERT_EQ(recs.end_at, recs_section.offset + recs_section.size);
  ASSERT_GT(recs.heads.size(), 20u);
  const uint32_t num_states = static_cast<uint32_t>(view.num_states());
  const uint32_t num_tokens = static_cast<uint32_t>(view.num_tokens());
  const uint32_t num_slots = static_cast<uint32_t>(recs.slots);
  const uint32_t label_slots = static_cast<uint32_t>(view.hubs().num_slots);
  // Records the damage below needs: a hub's, and full ones (top_k children,
  // so that a token they lack is looked up past them: a hub's label table).
  std::vector<uint32_t> hubs, full;
  for (uint32_t h : recs.heads) {
    const uint32_t bits = recs.Field(intact_bytes, h, kBits);
    if (Recs::Hub(bits)) hubs.push_back(h);
    if (Recs::Size(bits) == top_k) full.push_back(h);
  }
  ASSERT_FALSE(hubs.empty()) << "the test index has no hub record";
  ASSERT_FALSE(full.empty()) << "the test index has no record of top_k children";

  // Each damage edits a copy of the intact bytes (`b`). The helpers call
  // `change` with every record's head slot, or with every entry's slot and
  // its record's head slot.
  auto each_head = [&](auto&& change) {
    for (uint32_t h : recs.heads) change(h);
  };
  auto each_entry = [&](auto&& change) {
    for (uint32_t h : recs.heads)
      for (uint32_t i = 0; i < Recs::Size(recs.Field(intact_bytes, h, kBits)); ++i)
        change(h, h + 1 + i);
  };
  std::mt19937_64 rng(5);  // random bytes
  struct Case {
    std::string what;
    std::function<void(Bytes&)> damage;
  };
  std::vector<Case> cases = {
      // record_begin.
      {"record offsets decreasing (the array reversed)",
       [&](Bytes& b) {
         for (uint64_t k = 0; k <= recs.clones; ++k)
           Store32(b, recs.BeginAt(k), recs.Begin(intact_bytes, recs.clones - k));
       }},
      {"record offsets one slot late (heads read from entries)",
       [&](Bytes& b) {
         for (uint64_t k = 0; k < recs.clones; ++k)
           if (recs.Begin(intact_bytes, k) < recs.Begin(intact_bytes, k + 1))
             Store32(b, recs.BeginAt(k), recs.Begin(intact_bytes, k) + 1);
       }},
      {"record offsets beyond the slots",
       [&](Bytes& b) {
         for (uint64_t k = 0; k <= recs.clones; ++k)
           Store32(b, recs.BeginAt(k), num_slots + static_cast<uint32_t>(k));
       }},
      {"the last record offset kNoRecord, a middle one past the slots",
       [&](Bytes& b) {
         Store32(b, recs.BeginAt(recs.clones), format::kNoRecord);
         Store32(b, recs.BeginAt(recs.clones / 2), num_slots + 1);
       }},
      // Heads.
      {"a head whose children run past the end of the slots",
       [&](Bytes& b) {
         const uint32_t h = recs.heads.back();
         const uint32_t room = num_slots - h - 1;  // slots after the head
         const uint32_t size = std::min(top_k, room + 1);
         // size children and, where that still fits, the hub slot past the end
         Store32(b, recs.FieldAt(h, kBits), size | (size <= room ? 1u << 8 : 0u));
       }},
      {"head sizes above top_k",
       [&](Bytes& b) {
         each_head([&](uint32_t h) {
           const uint32_t bits = recs.Field(intact_bytes, h, kBits);
           Store32(b, recs.FieldAt(h, kBits), (bits & ~0xffu) | (top_k + 1 + h % 3));
         });
       }},
      {"head sizes of 255",
       [&](Bytes& b) {
         each_head([&](uint32_t h) {
           Store32(b, recs.FieldAt(h, kBits), recs.Field(intact_bytes, h, kBits) | 0xff);
         });
       }},
      {"head bits above the hub bit",
       [&](Bytes& b) {
         each_head([&](uint32_t h) {
           Store32(b, recs.FieldAt(h, kBits), recs.Field(intact_bytes, h, kBits) | 1u << 9);
         });
       }},
      {"head lengths and counts above the tokens",
       [&](Bytes& b) {
         each_head([&](uint32_t h) {
           Store32(b, recs.FieldAt(h, h % 2 ? kLen : kCount), num_tokens + 1 + h % 5);
         });
       }},
      {"head counts 0",
       [&](Bytes& b) { each_head([&](uint32_t h) { Store32(b, recs.FieldAt(h, kCount), 0); }); }},
      // Entries.
      {"entry targets at or past the states",
       [&](Bytes& b) {
         each_entry([&](uint32_t, uint32_t e) {
           Store32(b, recs.FieldAt(e, kTarget), e % 2 ? num_states : format::kNoRecord);
         });
       }},
      {"entry targets the root",
       [&](Bytes& b) {
         each_entry([&](uint32_t, uint32_t e) { Store32(b, recs.FieldAt(e, kTarget), 0); });
       }},
      {"entry tokens at or past the vocabulary",
       [&](Bytes& b) {
         each_entry([&](uint32_t, uint32_t e) {
           Store32(b, recs.FieldAt(e, kToken), e % 2 ? kind.vocab : format::kNoRecord);
         });
       }},
      {"entry counts 0",
       [&](Bytes& b) {
         each_entry([&](uint32_t, uint32_t e) { Store32(b, recs.FieldAt(e, kEntryCount), 0); });
       }},
      {"entry counts above their head's",
       [&](Bytes& b) {
         each_entry([&](uint32_t h, uint32_t e) {
           Store32(b, recs.FieldAt(e, kEntryCount), recs.Field(intact_bytes, h, kCount) + 1);
         });
       }},
      {"entry counts 1 on clones (their record field read as a token)",
       [&](Bytes& b) {
         each_entry([&](uint32_t, uint32_t e) {
           if (view.IsClone(recs.Field(intact_bytes, e, kTarget)))
             Store32(b, recs.FieldAt(e, kEntryCount), 1);
         });
       }},
      // Fields that name records.
      {"entry records outside the slots",
       [&](Bytes& b) {
         each_entry([&](uint32_t, uint32_t e) {
           Store32(b, recs.FieldAt(e, kEntryRecord), e % 2 ? num_slots + e : format::kNoRecord - 1);
         });
       }},
      {"entry records on entries, and a token past the separator on positions",
       [&](Bytes& b) {
         each_entry([&](uint32_t, uint32_t e) {
           Store32(b, recs.FieldAt(e, kEntryRecord), e + 1 < num_slots ? e + 1 : e);
         });
       }},
      {"entry records that are their own record (a cycle downwards)",
       [&](Bytes& b) {
         each_entry([&](uint32_t h, uint32_t e) { Store32(b, recs.FieldAt(e, kEntryRecord), h); });
       }},
      {"link records outside the slots",
       [&](Bytes& b) {
         each_head([&](uint32_t h) {
           Store32(b, recs.FieldAt(h, kLinkRecord), h % 2 ? num_slots + h : format::kNoRecord - 1);
         });
       }},
      {"link records on entries",
       [&](Bytes& b) {
         each_head([&](uint32_t h) { Store32(b, recs.FieldAt(h, kLinkRecord), h + 1); });
       }},
      {"link records to themselves",
       [&](Bytes& b) {
         each_head([&](uint32_t h) { Store32(b, recs.FieldAt(h, kLinkRecord), h); });
       }},
      {"link record cycles A -> B -> A with equal lengths",
       [&](Bytes& b) {
         for (size_t i = 0; i + 1 < recs.heads.size(); i += 2) {
           const uint32_t x = recs.heads[i], y = recs.heads[i + 1];
           const uint32_t len =
               std::max(recs.Field(intact_bytes, x, kLen), recs.Field(intact_bytes, y, kLen));
           Store32(b, recs.FieldAt(x, kLinkRecord), y);
           Store32(b, recs.FieldAt(y, kLinkRecord), x);
           Store32(b, recs.FieldAt(x, kLen), len);
           Store32(b, recs.FieldAt(y, kLen), len);
         }
       }},
      {"link record cycles A -> B -> A with their own lengths",
       [&](Bytes& b) {
         for (size_t i = 0; i + 1 < recs.heads.size(); i += 2) {
           Store32(b, recs.FieldAt(recs.heads[i], kLinkRecord), recs.heads[i + 1]);
           Store32(b, recs.FieldAt(recs.heads[i + 1], kLinkRecord), recs.heads[i]);
         }
       }},
      {"link records to the longest record",
       [&](Bytes& b) {
         uint32_t longest = recs.heads[0];
         for (uint32_t h : recs.heads)
           if (recs.Field(intact_bytes, h, kLen) > recs.Field(intact_bytes, longest, kLen))
             longest = h;
         each_head([&](uint32_t h) { Store32(b, recs.FieldAt(h, kLinkRecord), longest); });
       }},
      // Positions' link records.
      {"position link records outside the slots",
       [&](Bytes& b) {
         for (uint64_t p = 0; p < recs.positions; ++p)
           Store32(b, recs.LinkAt(p),
                   p % 2 ? num_slots + static_cast<uint32_t>(p) : format::kNoRecord - 1);
       }},
      {"position link records on entries",
       [&](Bytes& b) {
         for (uint64_t p = 0; p < recs.positions; ++p)
           Store32(b, recs.LinkAt(p), recs.heads[p % recs.heads.size()] + 1);
       }},
      {"position link records to the longest record, or a full one",
       [&](Bytes& b) {
         uint32_t longest = recs.heads[0];
         for (uint32_t h : recs.heads)
           if (recs.Field(intact_bytes, h, kLen) > recs.Field(intact_bytes, longest, kLen))
             longest = h;
         for (uint64_t p = 0; p < recs.positions; ++p)
           Store32(b, recs.LinkAt(p), p % 2 ? longest : full[p % full.size()]);
       }},
      // A hub's slot: where its label table is in HUBS.
      {"hub slots with an absurd label-table range",
       [&](Bytes& b) {
         for (uint32_t h : hubs) {
           const uint32_t slot = h + 1 + Recs::Size(recs.Field(intact_bytes, h, kBits));
           for (unsigned f = 0; f < 4; ++f)
             Store32(b, recs.FieldAt(slot, f), format::kNoRecord - f);
         }
       }},
      {"hub slots with a label table straddling the end of HUBS",
       [&](Bytes& b) {
         for (uint32_t h : hubs) {
           const uint32_t slot = h + 1 + Recs::Size(recs.Field(intact_bytes, h, kBits));
           Store32(b, recs.FieldAt(slot, 0), label_slots - 1);
           Store32(b, recs.FieldAt(slot, 1), 2);
         }
       }},
      {"hub slots with a valid range but edges past EDGE",
       [&](Bytes& b) {
         for (uint32_t h : hubs) {
           const uint32_t slot = h + 1 + Recs::Size(recs.Field(intact_bytes, h, kBits));
           Store32(b, recs.FieldAt(slot, 2), format::kNoRecord);
           Store32(b, recs.FieldAt(slot, 3), format::kNoRecord);
         }
       }},
      {"the hub bit set in records that are not hubs (the next slot read as a label table)",
       [&](Bytes& b) {
         each_head([&](uint32_t h) {
           const uint32_t bits = recs.Field(intact_bytes, h, kBits);
           if (!Recs::Hub(bits) && h + 1 + Recs::Size(bits) < num_slots)
             Store32(b, recs.FieldAt(h, kBits), bits | 1u << 8);
         });
       }},
      {"records that are not hubs announcing top_k children and a label table",
       [&](Bytes& b) {
         each_head([&](uint32_t h) {
           if (!Recs::Hub(recs.Field(intact_bytes, h, kBits)) && h + 1 + top_k < num_slots)
             Store32(b, recs.FieldAt(h, kBits), top_k | 1u << 8);
         });
       }},
  };
  // Each array as a whole, with each damage of the section-wide test.
  const std::pair<const char*, std::pair<uint64_t, uint64_t>> arrays[] = {
      {"record offsets", {recs.begin_at, recs.slots_at}},
      {"slots", {recs.slots_at, recs.links_at}},
      {"position link records", {recs.links_at, recs.end_at}},
  };
  for (const auto& [name, range] : arrays)
    for (Damage d : kDamages)
      cases.push_back({std::string(name) + " with " + Name(d), [&, range = range, d](Bytes& b) {
                         Apply(b.data() + range.first, range.second - range.first, d, rng);
                       }});

  std::vector<Drafts> intact;
  std::string error;
  const Driven driven_intact = DriveEverything(original_path, kind, workloads, &intact, &error);
  ASSERT_EQ(error, "");
  ASSERT_TRUE(driven_intact.records_from_file);
  ExpectCOpenOfIntact(kind, driven_intact);
  format::OpenOptions verify;
  verify.verify = true;
  const std::string path = TempPath(std::string(kind.name) + "_recs_damaged.sam");
  size_t changed = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Bytes bytes = intact_bytes;
    c.damage(bytes);
    ASSERT_NE(bytes, intact_bytes) << "the damage changed nothing";
    sam::testing::Reseal(bytes.data(), bytes.size());
    WriteFile(path, bytes);
    std::string refusal;
    try {
      format::IndexFile::Open(path, verify);
      ADD_FAILURE() << "verify accepted the file";
    } catch (const format::FormatError& e) {
      const std::string message = e.what();
      EXPECT_EQ(e.code(), format::ErrorCode::kCorruptStructure) << message;
      EXPECT_TRUE(Lists(SectionsNamed(message, path), "RECS")) << message;
      refusal = message.substr(std::min(message.size(), path.size() + 2));
    }
    {
      const format::IndexFile file = format::IndexFile::Open(path);
      const auto index = StaticIndex::Create(&file.view(), options.file_records);
      ASSERT_TRUE(index->records_from_file());
      EXPECT_EQ(SweepRecords(*index), "");
    }
    std::vector<Drafts> runs;
    error.clear();
    const Driven driven = DriveEverything(path, kind, workloads, &runs, &error);
    ASSERT_TRUE(driven.opened) << "refused at open: the damage must survive the O(1) checks";
    EXPECT_TRUE(driven.records_from_file);
    EXPECT_EQ(driven.c_file_records, driven_intact.c_file_records);
    EXPECT_EQ(error, "");
    // A few hundred steps per policy over the file's damaged records.
    for (size_t p = 0; p < std::size(kPolicies); ++p)
      EXPECT_GE(driven.file_record_steps[p], 200u) << "policy " << p;
    changed += runs != intact;
    // Damage that leaves every draft as it was hides records (offsets that
    // place none: the automaton answers) or lies where these streams do not
    // reach; records never change a draft, only its cost.
    std::printf("%s%s: %s\n", c.what.c_str(), runs == intact ? " (drafts unchanged)" : "",
                refusal.c_str());
  }
  std::printf("%zu damaged record sections, %zu of them changed some draft\n", cases.size(),
              changed);
  EXPECT_GE(changed, cases.size() / 2);  // the sessions did read the damaged records
  std::remove(path.c_str());
  std::remove(original_path.c_str());
}

INSTANTIATE_TEST_SUITE_P(CorruptIndex, CorruptIndexFile, ::testing::Values(kLowDegree, kCDefaults),
                         KindName);

// Sets value i of the packed array at `offset` of the given width.
void SetPacked(Bytes& b, uint64_t offset, unsigned width, uint64_t i, uint64_t value) {
  for (unsigned k = 0; k < width; ++k) {
    const uint64_t bit = i * width + k;
    uint8_t& byte = b[offset + bit / 8];
    byte = static_cast<uint8_t>((byte & ~(1u << (bit % 8))) | (((value >> k) & 1) << (bit % 8)));
  }
}

// A suffix-link cycle: the climb of the matching rule used to loop forever
// on it. Now a link that does not shorten the match stops matching.
TEST(CorruptIndex, SuffixLinkCycleStopsMatching) {
  const std::string original_path = TempPath("cycle_original.sam");
  const Corpus corpus = BuildCorpus(original_path);
  const format::IndexFile original = format::IndexFile::Open(original_path);
  const format::IndexView& view = original.view();
  // A state x whose link l is neither the root nor state 1 (whose link is
  // checked on open), and a token neither has a transition on.
  uint64_t x = 0, l = 0;
  uint32_t token = 0;
  for (uint64_t v = view.num_states() - 1; v > 1 && x == 0; --v) {
    const uint64_t link = view.Link(v);
    if (link <= 1) continue;
    for (uint32_t c = 0; c < kVocab; ++c)
      if (view.Next(v, c) == format::kNoState && view.Next(link, c) == format::kNoState) {
        x = v, l = link, token = c;
        break;
      }
  }
  ASSERT_NE(x, 0u) << "no suitable state in the test index";
  // l links back to x: x -> l -> x -> ...
  Bytes bytes = corpus.bytes;
  const std::vector<Section> sections = SectionsOf(bytes);
  const Section& link_section = Find(sections, "LINK");
  SetPacked(bytes, link_section.offset, bytes[kStateWidthAt], l, x);
  sam::testing::Reseal(bytes.data(), bytes.size());
  const std::string path = TempPath("cycle.sam");
  WriteFile(path, bytes);

  format::OpenOptions verify;
  verify.verify = true;
  try {
    format::IndexFile::Open(path, verify);
    ADD_FAILURE() << "verify accepted a suffix-link cycle";
  } catch (const format::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("LINK, CLEN: a suffix link must lead to a shorter state"),
              std::string::npos)
        << e.what();
  }
  const format::IndexFile file = format::IndexFile::Open(path);
  ASSERT_EQ(file.view().Link(l), x);
  for (bool hubs : {false, true}) {
    std::shared_ptr<const StaticIndex> prepared;
    StaticCursor cursor(&file.view());
    if (hubs) {
      prepared = StaticIndex::Create(&file.view(), {.min_degree = 2});
      cursor = StaticCursor(prepared.get());
    }
    cursor.Set(StaticMatch{x, file.view().Len(x)});
    cursor.Advance(token);  // climbs x -> l -> x: stops there
    EXPECT_EQ(cursor.match().state, format::kRoot);
    EXPECT_EQ(cursor.match().len, 0u);
  }
  std::remove(path.c_str());
  std::remove(original_path.c_str());
}

// A degree vector that passes the open checks (its first and last bits and
// the bit of the last select sample are ones) but is zero elsewhere: every
// state used to appear to own every stored transition. Edge ranges are now
// bounded by the vocabulary size and lie inside EDGE.
TEST(CorruptIndex, SparseDegreeVectorGivesBoundedEdgeRanges) {
  const std::string original_path = TempPath("edeg_original.sam");
  const Corpus corpus = BuildCorpus(original_path);
  const format::IndexFile original = format::IndexFile::Open(original_path);
  const format::IndexView& ov = original.view();
  const uint64_t last_sample = ov.select_samples().Get(ov.select_samples().size() - 1);
  const uint64_t bits = ov.degree_bit_count();
  ASSERT_GT(ov.num_edges(), 4u * kVocab) << "the test needs more stored transitions";

  Bytes bytes = corpus.bytes;
  const std::vector<Section> sections = SectionsOf(bytes);
  const Section& edeg = Find(sections, "EDEG");
  std::fill(bytes.begin() + edeg.offset, bytes.begin() + edeg.offset + edeg.size, 0);
  for (uint64_t bit : {uint64_t{0}, last_sample, bits - 1})
    bytes[edeg.offset + bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
  sam::testing::Reseal(bytes.data(), bytes.size());
  const std::string path = TempPath("edeg.sam");
  WriteFile(path, bytes);

  const format::IndexFile file = format::IndexFile::Open(path);  // passes the O(1) checks
  const format::IndexView& view = file.view();
  size_t nonempty = 0;
  for (uint64_t v = 0; v < view.num_states(); ++v) {
    const auto [lo, hi] = view.EdgeRange(v);
    ASSERT_LE(lo, hi) << v;
    ASSERT_LE(hi, view.num_edges()) << v;
    ASSERT_LE(hi - lo, kVocab) << "state " << v;
    nonempty += hi > lo;
  }
  view.ForEachEdgeRange([&](uint64_t v, uint64_t lo, uint64_t hi) {
    ASSERT_LE(lo, hi) << v;
    ASSERT_LE(hi, view.num_edges()) << v;
    ASSERT_LE(hi - lo, kVocab) << "state " << v;
  });
  std::printf("%zu of %llu states keep a nonempty edge range\n", nonempty,
              static_cast<unsigned long long>(view.num_states()));
  format::OpenOptions verify;
  verify.verify = true;
  EXPECT_THROW(format::IndexFile::Open(path, verify), format::FormatError);
  std::remove(path.c_str());
  std::remove(original_path.c_str());
}

// LINK all zeros, re-sealed: every state links to the root, which is
// shorter, so the old verify said OK. Occurrence counts no longer add up.
TEST(CorruptIndex, AllZeroLinksFailVerifyOnCounts) {
  const std::string original_path = TempPath("links_original.sam");
  const Corpus corpus = BuildCorpus(original_path);
  Bytes bytes = corpus.bytes;
  const std::vector<Section> sections = SectionsOf(bytes);
  const Section& links = Find(sections, "LINK");
  std::fill(bytes.begin() + links.offset, bytes.begin() + links.offset + links.size, 0);
  sam::testing::Reseal(bytes.data(), bytes.size());
  const std::string path = TempPath("links.sam");
  WriteFile(path, bytes);
  format::OpenOptions verify;
  verify.verify = true;
  try {
    format::IndexFile::Open(path, verify);
    ADD_FAILURE() << "verify accepted all-zero links";
  } catch (const format::FormatError& e) {
    EXPECT_EQ(e.code(), format::ErrorCode::kCorruptStructure);
    EXPECT_NE(std::string(e.what()).find("LINK"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
  std::remove(original_path.c_str());
}

}  // namespace
}  // namespace sam::runtime
