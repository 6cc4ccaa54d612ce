// Named corpus sets over a data folder laid out as corpora/README.md describes and
// corpora/fetch.sh lays it out. The table is the one place that knows the file names:
//
//   sam::corpora::ResolvedPreset preset = sam::corpora::ResolvePreset("default", "../shared/data");
//   for (const auto& corpus : preset.corpora) Index(corpus.kind, corpus.path);
//   for (const auto& note : preset.notes) std::cerr << "note: " << note << "\n";
//
// Presets (paths relative to the data folder; "optional" entries are those fetch.sh cannot
// always provide: no recorded checksum, or a conversion that needs python3):
//   default  alpaca      alpaca/alpaca_data.json
//            alpaca      code_alpaca/*.json (sorted by name; at least one)
//            python18k   python18k/train.jsonl     optional
//            gsm8k       gsm8k/train.jsonl
//            hagrid      hagrid/train.jsonl        optional
//   gsm8k    gsm8k       gsm8k/train.jsonl
// A required entry that is missing is an error (the folder is incomplete: nothing is built from
// part of it); an optional entry that is missing is left out with a note saying so (and, for
// python18k, whether the unconverted train.parquet is there). Thread-safe; reads the directory.
#ifndef SAM_CORPORA_PRESETS_H_
#define SAM_CORPORA_PRESETS_H_

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sam/corpora/corpora.h"
#include "sam/corpora/error.h"

namespace sam::corpora {

// One line of a preset's table.
struct PresetEntry {
  Kind kind;
  // Relative to the data folder: a file, or "DIR/*.EXT" for every regular file of DIR whose
  // name ends in .EXT, in byte-wise name order.
  std::string_view relative_path;
  bool optional;
  // For an optional entry: another file whose presence means the entry was fetched but not
  // prepared ("" when none), and what to do then.
  std::string_view unprepared_path;
  std::string_view unprepared_hint;
};

// The preset names PresetTable accepts: "default", "gsm8k".
std::span<const std::string_view> PresetNames();

// The table of `preset`. Throws CorpusError (kInvalidArgument) naming the valid presets for an
// unknown name.
std::span<const PresetEntry> PresetTable(std::string_view preset);

struct PresetCorpus {
  Kind kind;
  std::string path;  // data_dir joined with the relative path
};

struct ResolvedPreset {
  std::vector<PresetCorpus> corpora;  // in table order
  // One line per optional entry left out, for the caller to show, e.g.
  // "preset 'default': optional python18k/train.jsonl not found under DATA; left out".
  std::vector<std::string> notes;
};

// The corpora of `preset` found under `data_dir`. Throws CorpusError: kInvalidArgument for an
// unknown preset, kIo when `data_dir` is not a directory or a required entry is missing (the
// message names every missing required entry and how to fetch it).
ResolvedPreset ResolvePreset(std::string_view preset, const std::string& data_dir);

}  // namespace sam::corpora

#endif  // SAM_CORPORA_PRESETS_H_
