// A corrupt index never hangs or crashes the runtime, whatever its checksums
// say.
//
// Checksums catch accidents, not a file whose checksums were recomputed after
// its contents changed. Each section of a test index is overwritten in turn
// with zeros, ones, random bytes or its own two halves swapped, then
// re-sealed (section and header checksums recomputed, so that every checksum
// check passes), and:
//  (a) deep verify (IndexFile::Verify: sam-inspect --verify, SAM_OPEN_VERIFY)
//      refuses the file with a structural error whose message lists the
//      damaged section among the sections it read, then names the invariant;
//  (b) opened without verify, the file is either refused at open or drives
//      sessions (paper, tree and calibrated policies; the bare IndexView, a
//      prepared StaticIndex, and the C API with SAM_OPEN_PREPARE) through
//      many steps on random streams, each returning a well-formed draft or an
//      error. Damage to sections that drafting never reads (META, VOCB,
//      TEST) leaves every draft as it was.
// A hang fails the test through its CTest TIMEOUT; nothing here is timed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
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

// Where the damage goes: the whole section, or all of it but its first and
// last 16 bytes. Opening reads a few values at both ends of a section (and
// its zero padding at the end), so whole-section damage is mostly refused
// there; interior damage passes those checks and reaches the sessions.
enum class Region { kWhole, kInterior };
constexpr Region kRegions[] = {Region::kWhole, Region::kInterior};
constexpr uint64_t kEdgeBytes = 16;

Bytes Damaged(const Bytes& original, const Section& s, Region region, Damage d,
              std::mt19937_64& rng) {
  Bytes b = original;
  const uint64_t skip = region == Region::kInterior ? std::min(kEdgeBytes, s.size / 2) : 0;
  uint8_t* p = b.data() + s.offset + skip;
  const uint64_t size = s.size - 2 * skip;
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
// transitions), a vocabulary (VOCB) and self-test samples (TEST).
struct Corpus {
  std::vector<Text> docs;
  Bytes bytes;
};

Corpus BuildCorpus(const std::string& path) {
  std::mt19937 rng(8);
  Corpus c;
  Text phrase(25);
  for (auto& t : phrase) t = rng() % kVocab;
  for (int d = 0; d < 50; ++d) {
    Text doc;
    while (doc.size() < 40) {
      if (rng() % 4 == 0) {
        const size_t from = rng() % phrase.size();
        doc.insert(doc.end(), phrase.begin() + from,
                   phrase.begin() + std::min<size_t>(phrase.size(), from + 8));
      } else {
        doc.push_back(rng() % 3 == 0 ? rng() % 4 : rng() % kVocab);
      }
    }
    c.docs.push_back(doc);
  }
  automaton::IndexInfo info;
  for (uint32_t t = 0; t < kVocab; ++t) info.vocabulary.push_back("t" + std::to_string(t));
  // The accelerator sections with the parameters the sessions below use,
  // so that they read the file's tables (damaged ones included).
  info.accelerators = format::AcceleratorParams{.min_degree = 4, .top_k = 8,
                                                .filter_bits_per_edge = 10};
  automaton::BuildIndexFile(c.docs, kVocab, path, info);
  c.bytes = ReadFile(path);
  return c;
}

// Streams: stretches of the documents with random tokens between them.
Text Stream(const std::vector<Text>& docs, std::mt19937& rng, size_t length) {
  Text s;
  while (s.size() < length) {
    if (rng() % 3 == 0) {
      s.push_back(rng() % kVocab);
    } else {
      const Text& d = docs[rng() % docs.size()];
      const size_t from = rng() % d.size();
      s.insert(s.end(), d.begin() + from, d.begin() + std::min(d.size(), from + 1 + rng() % 12));
    }
  }
  return s;
}

std::string Malformed(const uint32_t* tokens, const int32_t* parents, const uint16_t* depths,
                      size_t count, uint32_t start, size_t budget) {
  return test_util::MalformedDraft(tokens, parents, depths, count, start, kVocab, budget);
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
  Text prompt;
  Text stream;
};

std::vector<Workload> Workloads(const std::vector<Text>& docs) {
  std::mt19937 rng(21);
  std::vector<Workload> w(3);
  for (Workload& x : w) {
    x.prompt = Stream(docs, rng, 30);
    x.stream = Stream(docs, rng, 300);
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
                                      w.stream[pos], Budget(policy));
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
        Malformed(d.tokens, d.parents, d.depths, d.count, w.stream[pos], Budget(p));
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

// Every run over the index at `path`, opened without verify: per policy and
// workload, the bare view, a prepared StaticIndex, one with child records
// (records followed from record to record), the C API. Appends what each
// drafted to *all (empty runs where the file was refused at open). Returns
// whether the file opened.
bool DriveEverything(const std::string& path, const std::vector<Workload>& workloads,
                     std::vector<Drafts>* all, std::string* error) {
  std::unique_ptr<format::IndexFile> file;
  std::shared_ptr<const StaticIndex> prepared, with_records;
  try {
    file = std::make_unique<format::IndexFile>(format::IndexFile::Open(path));
    prepared = StaticIndex::Create(&file->view(), {.min_degree = 4});
    with_records = StaticIndex::Create(&file->view(), {.min_degree = 4, .record_min_count = 2});
  } catch (const format::FormatError&) {
    file.reset();  // refused at open: an error, as allowed
  }
  for (Policy p : kPolicies) {
    SessionOptions o;
    o.max_dynamic_bytes = 1 << 20;
    o.policy = p;
    for (int variant = 0; variant < 3; ++variant) {
      Session s(o);
      if (file && variant == 1)
        s.AttachIndex(prepared);
      else if (file && variant == 2)
        s.AttachIndex(with_records);
      else if (file)
        s.AttachIndex(&file->view());
      for (const Workload& w : workloads) {
        all->push_back(file ? Drive(s, p, w, error) : Drafts{});
        if (!error->empty()) return file != nullptr;
      }
    }
  }
  sam_index* index = nullptr;
  const int status = sam_index_open(path.c_str(), nullptr, SAM_OPEN_PREPARE, &index);
  if (status != SAM_OK && std::string(sam_last_error()).empty()) *error = "open: no message";
  for (sam_policy p : kCPolicies)
    for (const Workload& w : workloads) {
      all->push_back(status == SAM_OK ? DriveC(index, p, w, error) : Drafts{});
      if (!error->empty()) break;
    }
  sam_index_close(index);
  return file != nullptr;
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

TEST(CorruptIndex, EverySectionResealedWithDamageIsRefusedByVerifyAndNeverHangsASession) {
  const std::string original_path = TempPath("corrupt_original.sam");
  const Corpus corpus = BuildCorpus(original_path);
  const std::vector<Section> sections = SectionsOf(corpus.bytes);
  ASSERT_EQ(sections.size(), 15u) << "expected every section, VOCB, TEST, HUBS and FILT included";
  const std::vector<Workload> workloads = Workloads(corpus.docs);

  // The intact index: verify accepts it, and the harness reaches static drafts.
  format::OpenOptions verify;
  verify.verify = true;
  ASSERT_NO_THROW(format::IndexFile::Open(original_path, verify));
  {
    const format::IndexFile f = format::IndexFile::Open(original_path);
    const auto prepared = StaticIndex::Create(&f.view(), {.min_degree = 4});
    ASSERT_TRUE(prepared->accelerators_from_file());
    ASSERT_GT(prepared->num_hubs(), 0u);
  }
  std::vector<Drafts> intact;
  std::string error;
  DriveEverything(original_path, workloads, &intact, &error);
  ASSERT_EQ(error, "");
  size_t long_drafts = 0;
  for (const Drafts& run : intact)
    for (const Text& d : run) long_drafts += d.size() > 3;
  ASSERT_GT(long_drafts, 100u);

  std::mt19937_64 rng(99);
  const std::string path = TempPath("corrupt_resealed.sam");
  size_t checked = 0, opened = 0;
  for (const Section& section : sections) {
    for (Region region : kRegions) {
      for (Damage damage : kDamages) {
        const Bytes bytes = Damaged(corpus.bytes, section, region, damage, rng);
        const std::string what =
            section.tag + (region == Region::kWhole ? "" : " interior") + " with " + Name(damage);
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
        opened += DriveEverything(path, workloads, &runs, &error);
        EXPECT_EQ(error, "") << what;
        if (section.tag == "META" || section.tag == "VOCB" || section.tag == "TEST") {
          EXPECT_TRUE(runs == intact) << what << ": drafting does not read this section";
        }
      }
    }
  }
  std::printf("%zu damaged files, %zu of them opened without verify and drafted from\n", checked,
              opened);
  EXPECT_GE(checked, 15u * 7);
  EXPECT_GE(opened, 15u * 2);  // the sessions did meet damaged indexes
  std::remove(path.c_str());
  std::remove(original_path.c_str());
}

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
