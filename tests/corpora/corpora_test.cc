// Tests of the corpora library: every reader on fixtures written here, both templates with exact
// expected strings, malformed input and its messages, skip_bad, BOM, blank lines, text modes,
// token-id documents, and (when present) the real data under SAM_DATA_DIR.
#include "sam/corpora/corpora.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "sam/corpora/presets.h"
#include "sam/corpora/templates.h"
#include "sam/error.h"
#include "temp_dir.h"

namespace sam::corpora {
namespace {

namespace fs = std::filesystem;
using Code = CorpusError::Code;

constexpr char kSystem[] =
    "A chat between a curious user and an artificial intelligence assistant. The assistant "
    "gives helpful, detailed, and polite answers to the user's questions.";

std::string Vicuna(const std::string& prompt, const std::string& response) {
  return std::string(kSystem) + " USER: " + prompt + " ASSISTANT: " + response;
}

struct ReadResult {
  std::vector<std::string> documents;
  ReadStats stats;
};

class CorporaTest : public ::testing::Test {
 protected:
  // Writes `content` to `name` in the test's temporary directory; returns the path.
  std::string Write(const std::string& name, const std::string& content) {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary);
    out << content;
    return path.string();
  }

  static ReadResult Read(Kind kind, const std::string& path, const ReadOptions& options = {}) {
    ReadResult result;
    result.stats = ReadCorpus(kind, path, options, [&](std::string&& document) {
      result.documents.push_back(std::move(document));
    });
    return result;
  }

  sam::testing::TempDir tmp_{"sam_corpora_test"};
  const fs::path dir_ = tmp_.path();
};

// Runs `read`, expects a CorpusError with `code` whose message contains every one of `parts`.
void ExpectError(const std::function<void()>& read, Code code,
                 std::initializer_list<std::string> parts) {
  try {
    read();
    ADD_FAILURE() << "no CorpusError thrown";
  } catch (const CorpusError& error) {
    EXPECT_EQ(error.code(), code) << error.what();
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(error.what()).find(part), std::string::npos)
          << "message '" << error.what() << "' lacks '" << part << "'";
    }
  }
}

void ExpectCorpusError(Kind kind, const std::string& path, Code code,
                       std::initializer_list<std::string> parts, const ReadOptions& options = {}) {
  ExpectError([&] { ReadCorpus(kind, path, options, [](std::string&&) {}); }, code, parts);
}

constexpr char kAlpacaArray[] = R"([
  {"instruction": "Give a tip.", "input": "", "output": "Sleep well."},
  {"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"}
])";

// ---------------------------------------------------------------------------------------------
// Names and templates.

TEST(NamesTest, KindsRoundTrip) {
  for (const char* name : {"alpaca", "python18k", "gsm8k", "hagrid", "jsonl", "text"}) {
    EXPECT_EQ(KindName(ParseKind(name)), name);
  }
  ExpectError([] { ParseKind("Alpaca"); }, Code::kInvalidArgument,
              {"'Alpaca'", "alpaca, python18k, gsm8k, hagrid, jsonl, text"});
  // The oracle is the kind table: every kind parses from its name and is listed in the message.
  ASSERT_EQ(AllKinds().size(), 6u);
  std::string message;
  try {
    ParseKind("nosuchkind");
  } catch (const CorpusError& error) {
    message = error.what();
  }
  for (Kind kind : AllKinds()) {
    EXPECT_EQ(ParseKind(KindName(kind)), kind);
    EXPECT_NE(message.find(std::string(KindName(kind))), std::string::npos) << message;
    EXPECT_NE(KindNames().find(std::string(KindName(kind))), std::string::npos);
  }
}

TEST(NamesTest, TemplatesRoundTrip) {
  EXPECT_EQ(ParseTemplate("raw"), Template::kRaw);
  EXPECT_EQ(ParseTemplate("vicuna"), Template::kVicuna);
  EXPECT_EQ(TemplateName(Template::kRaw), "raw");
  EXPECT_EQ(TemplateName(Template::kVicuna), "vicuna");
  ExpectError([] { ParseTemplate("chatml"); }, Code::kInvalidArgument, {"'chatml'", "raw, vicuna"});
}

TEST(TemplatesTest, VicunaExactText) {
  EXPECT_EQ(kVicunaSystemPrompt, kSystem);
  EXPECT_EQ(RenderVicunaPrompt("Hi?"), std::string(kSystem) + " USER: Hi? ASSISTANT:");
  EXPECT_EQ(RenderVicuna("Hi?", "Hello."), std::string(kSystem) + " USER: Hi? ASSISTANT: Hello.");
  EXPECT_EQ(RenderVicuna("Hi?", ""), RenderVicunaPrompt("Hi?"));
  // The document starts with the prompt the model is given: a draft can run straight on.
  EXPECT_EQ(RenderVicuna("Hi?", "Hello.").rfind(RenderVicunaPrompt("Hi?"), 0), 0u);
}

TEST(TemplatesTest, RawJoinsNonEmptyParts) {
  EXPECT_EQ(JoinNonEmpty("a", "b"), "a\nb");
  EXPECT_EQ(JoinNonEmpty("", "b"), "b");
  EXPECT_EQ(JoinNonEmpty("a", ""), "a");
  EXPECT_EQ(JoinNonEmpty("", ""), "");
  EXPECT_EQ(RenderDocument(Template::kRaw, "p", "r"), "p\nr");
  EXPECT_EQ(RenderDocument(Template::kVicuna, "p", "r"), Vicuna("p", "r"));
}

// ---------------------------------------------------------------------------------------------
// Readers, both templates.

TEST_F(CorporaTest, AlpacaArrayRaw) {
  const ReadResult result = Read(Kind::kAlpaca, Write("alpaca.json", kAlpacaArray));
  EXPECT_EQ(result.documents,
            (std::vector<std::string>{"Give a tip.\nSleep well.", "Add the numbers.\n2 and 3\n5"}));
  EXPECT_EQ(result.stats.records, 2u);
  EXPECT_EQ(result.stats.documents, 2u);
  EXPECT_EQ(result.stats.skipped, 0u);
}

TEST_F(CorporaTest, AlpacaArrayVicuna) {
  ReadOptions options;
  options.templ = Template::kVicuna;
  const ReadResult result = Read(Kind::kAlpaca, Write("alpaca.json", kAlpacaArray), options);
  EXPECT_EQ(result.documents, (std::vector<std::string>{
                                  Vicuna("Give a tip.", "Sleep well."),
                                  Vicuna("Add the numbers.\n2 and 3", "5"),
                              }));
}

TEST_F(CorporaTest, AlpacaJsonlGivesTheSameDocuments) {
  const std::string jsonl =
      "{\"instruction\": \"Give a tip.\", \"input\": \"\", \"output\": \"Sleep well.\"}\n"
      "{\"instruction\": \"Add the numbers.\", \"input\": \"2 and 3\", \"output\": \"5\"}\n";
  EXPECT_EQ(Read(Kind::kAlpaca, Write("alpaca.jsonl", jsonl)).documents,
            Read(Kind::kAlpaca, Write("alpaca.json", kAlpacaArray)).documents);
}

TEST_F(CorporaTest, AlpacaExtraFieldsAndAbsentInput) {
  // CodeAlpaca's new_codealpaca.json carries an extra "response"; some Alpaca-style files omit
  // an empty "input".
  const std::string path = Write("code.json", R"j([
    {"instruction": "Print hi.", "input": "", "response": "print('hi')", "output": "print('hi')"},
    {"instruction": "Say no.", "output": "No."}
  ])j");
  EXPECT_EQ(Read(Kind::kAlpaca, path).documents,
            (std::vector<std::string>{"Print hi.\nprint('hi')", "Say no.\nNo."}));
}

TEST_F(CorporaTest, Python18kWithAndWithoutPrompt) {
  const std::string path =
      Write("python18k.jsonl", R"({"instruction": "Reverse a list.", "input": "[1, 2]", )"
                               R"("output": "x[::-1]", "prompt": "Below is an instruction..."})"
                               "\n"
                               R"j({"instruction": "Print 1.", "input": "", "output": "print(1)"})j"
                               "\n");
  EXPECT_EQ(Read(Kind::kPython18k, path).documents,
            (std::vector<std::string>{"Reverse a list.\n[1, 2]\nx[::-1]", "Print 1.\nprint(1)"}));
  ReadOptions vicuna;
  vicuna.templ = Template::kVicuna;
  EXPECT_EQ(Read(Kind::kPython18k, path, vicuna).documents,
            (std::vector<std::string>{Vicuna("Reverse a list.\n[1, 2]", "x[::-1]"),
                                      Vicuna("Print 1.", "print(1)")}));
  const std::string bad =
      Write("bad.jsonl", R"({"instruction": "a", "input": "", "output": "b", "prompt": 3})"
                         "\n");
  ExpectCorpusError(Kind::kPython18k, bad, Code::kBadRecord,
                    {"bad.jsonl", "line 1", "field 'prompt': is a number, expected a string"});
}

TEST_F(CorporaTest, Gsm8kBothTemplates) {
  const std::string path =
      Write("gsm8k.jsonl", R"({"question": "What is 2+3?", "answer": "2+3=5\n#### 5"})"
                           "\n"
                           R"({"question": "What is 1+1?", "answer": "#### 2"})"
                           "\n");
  EXPECT_EQ(Read(Kind::kGsm8k, path).documents,
            (std::vector<std::string>{"What is 2+3?\n2+3=5\n#### 5", "What is 1+1?\n#### 2"}));
  ReadOptions vicuna;
  vicuna.templ = Template::kVicuna;
  EXPECT_EQ(Read(Kind::kGsm8k, path, vicuna).documents,
            (std::vector<std::string>{Vicuna("What is 2+3?", "2+3=5\n#### 5"),
                                      Vicuna("What is 1+1?", "#### 2")}));
}

// Two queries in the HAGRID schema: the first with two answers (attributable null and 1), the
// second with none.
constexpr char kHagrid[] =
    R"({"query_id": "7", "query": "Who wrote Hamlet?", )"
    R"("quotes": [{"idx": 1, "docid": "12#0", "text": "Hamlet is a tragedy by Shakespeare."}, )"
    R"({"idx": 2, "docid": "12#3", "text": "It was written around 1600."}], )"
    R"("answers": [{"answer": "Shakespeare wrote it [1].", "attributable": null, )"
    R"("informative": 1, "sentences": [{"index": 0, "attributable": null, "informative": 1, )"
    R"("text": "Shakespeare wrote it [1]."}]}, )"
    R"({"answer": "William Shakespeare [1][2].", "attributable": 1, "informative": 0, )"
    R"("sentences": []}]})"
    "\n"
    R"({"query_id": "8", "query": "Why?", "quotes": [{"idx": 1, "docid": "1#0", "text": "Q."}], )"
    R"("answers": []})"
    "\n";

TEST_F(CorporaTest, HagridOneDocumentPerAnswer) {
  const std::string path = Write("hagrid.jsonl", kHagrid);
  const std::string prompt =
      "[1] Hamlet is a tragedy by Shakespeare.\n[2] It was written around 1600.\n"
      "Who wrote Hamlet?";
  const ReadResult raw = Read(Kind::kHagrid, path);
  EXPECT_EQ(raw.documents, (std::vector<std::string>{prompt + "\nShakespeare wrote it [1].",
                                                     prompt + "\nWilliam Shakespeare [1][2]."}));
  EXPECT_EQ(raw.stats.records, 2u);
  EXPECT_EQ(raw.stats.documents, 2u);
  EXPECT_EQ(raw.stats.skipped, 0u);
  ReadOptions vicuna;
  vicuna.templ = Template::kVicuna;
  EXPECT_EQ(Read(Kind::kHagrid, path, vicuna).documents,
            (std::vector<std::string>{Vicuna(prompt, "Shakespeare wrote it [1]."),
                                      Vicuna(prompt, "William Shakespeare [1][2].")}));
}

TEST_F(CorporaTest, HagridMalformedRecords) {
  const std::string quote_path =
      Write("quote.jsonl",
            "\n"
            R"({"query": "q", "quotes": [{"idx": 1, "text": "a"}, {"idx": 2}], )"
            R"("answers": [{"answer": "x"}]})"
            "\n");
  ExpectCorpusError(Kind::kHagrid, quote_path, Code::kBadRecord,
                    {"quote.jsonl", "line 2", "field 'quotes[1].text': missing"});
  const std::string answer_path =
      Write("answer.jsonl", R"({"query": "q", "quotes": [], "answers": [{"answer": "x"}, "y"]})"
                            "\n");
  ExpectCorpusError(
      Kind::kHagrid, answer_path, Code::kBadRecord,
      {"answer.jsonl", "line 1", "field 'answers[1]': is a string, expected an object"});
  const std::string idx_path =
      Write("idx.jsonl", R"({"query": "q", "quotes": [{"idx": "1", "text": "a"}], "answers": []})"
                         "\n");
  ExpectCorpusError(Kind::kHagrid, idx_path, Code::kBadRecord,
                    {"field 'quotes[0].idx': is a string, expected an integer"});
  // A bad second answer: the record is skipped whole, its good first answer is not emitted.
  ReadOptions skip;
  skip.skip_bad = true;
  const std::string partial =
      Write("partial.jsonl", R"({"query": "q", "quotes": [], "answers": [{"answer": "x"}, {}]})"
                             "\n");
  const ReadResult result = Read(Kind::kHagrid, partial, skip);
  EXPECT_TRUE(result.documents.empty());
  EXPECT_EQ(result.stats.skipped, 1u);
}

TEST_F(CorporaTest, JsonlTextField) {
  const std::string path = Write("docs.jsonl", R"({"body": "first doc", "id": 1})"
                                               "\n"
                                               R"({"body": "", "id": 2})"
                                               "\n"
                                               R"({"body": "third\ndoc"})"
                                               "\n");
  ReadOptions options;
  options.text_field = "body";
  options.templ = Template::kVicuna;  // does not apply to plain documents
  const ReadResult result = Read(Kind::kJsonl, path, options);
  EXPECT_EQ(result.documents, (std::vector<std::string>{"first doc", "third\ndoc"}));
  EXPECT_EQ(result.stats.records, 3u);
  EXPECT_EQ(result.stats.documents, 2u);
  ExpectCorpusError(Kind::kJsonl, path, Code::kBadRecord,
                    {"docs.jsonl", "line 1", "field 'text': missing"});
}

// ---------------------------------------------------------------------------------------------
// Malformed input.

TEST_F(CorporaTest, ArrayRecordErrorsNameRecordAndField) {
  const std::string missing = Write("alpaca_data.json", R"([
    {"instruction": "a", "input": "", "output": "b"},
    {"instruction": "c", "input": ""}
  ])");
  ExpectCorpusError(Kind::kAlpaca, missing, Code::kBadRecord,
                    {"alpaca_data.json: record 1: field 'output': missing"});
  const std::string mistyped =
      Write("mistyped.json", R"([{"instruction": null, "input": "", "output": "b"}])");
  ExpectCorpusError(Kind::kAlpaca, mistyped, Code::kBadRecord,
                    {"mistyped.json: record 0: field 'instruction': is null, expected a string"});
  const std::string not_object = Write("not_object.json", R"([{"instruction": "a", "output": "b"},
    ["instruction", "output"]])");
  ExpectCorpusError(Kind::kAlpaca, not_object, Code::kBadRecord,
                    {"not_object.json: record 1: record is an array, expected an object"});
}

// The one error family: a corpus error is a sam::Error whose code and context (file, record,
// field) are there for programs, not only in the message.
TEST_F(CorporaTest, ErrorsAreSamErrorsWithStructuredContext) {
  static_assert(std::is_base_of_v<sam::Error, CorpusError>);
  const std::string path = Write("ctx.jsonl", R"({"question": "q", "answer": "a"})"
                                              "\n"
                                              R"({"question": "q", "answer": [1]})"
                                              "\n");
  try {
    ReadCorpus(Kind::kGsm8k, path, {}, [](std::string&&) {});
    ADD_FAILURE() << "no error";
  } catch (const sam::Error& error) {
    EXPECT_EQ(error.code(), sam::ErrorCode::kBadRecord);
    EXPECT_EQ(error.context().file, path);
    EXPECT_EQ(error.context().record, "line 2");
    EXPECT_EQ(error.context().field, "answer");
    EXPECT_EQ(error.problem(), "is an array, expected a string");
    EXPECT_EQ(std::string(error.what()),
              path + ": line 2: field 'answer': is an array, expected a string");
  }
  const std::string array = Write("ctx.json", R"([{"instruction": "a", "output": 1}])");
  try {
    ReadCorpus(Kind::kAlpaca, array, {}, [](std::string&&) {});
    ADD_FAILURE() << "no error";
  } catch (const sam::Error& error) {
    EXPECT_EQ(error.code(), sam::ErrorCode::kBadRecord);
    EXPECT_EQ(error.context().file, array);
    EXPECT_EQ(error.context().record, "record 0");
    EXPECT_EQ(error.context().field, "output");
  }
  const std::string missing = (dir_ / "absent.jsonl").string();
  try {
    ReadCorpus(Kind::kGsm8k, missing, {}, [](std::string&&) {});
    ADD_FAILURE() << "no error";
  } catch (const sam::Error& error) {
    EXPECT_EQ(error.code(), sam::ErrorCode::kIo);
    EXPECT_EQ(error.context().file, missing);
  }
  try {
    ParseKind("nosuchkind");
    ADD_FAILURE() << "no error";
  } catch (const sam::Error& error) {
    EXPECT_EQ(error.code(), sam::ErrorCode::kInvalidArgument);
  }
}

TEST_F(CorporaTest, JsonlErrorsNameLineAndField) {
  const std::string path = Write("train.jsonl", R"({"question": "q", "answer": "a"})"
                                                "\n"
                                                "\n"
                                                R"({"question": "q", "answer": 7})"
                                                "\n");
  ExpectCorpusError(Kind::kGsm8k, path, Code::kBadRecord,
                    {"train.jsonl: line 3: field 'answer': is a number, expected a string"});
  const std::string broken = Write("broken.jsonl", R"({"question": "q", "answer": "a"})"
                                                   "\n"
                                                   R"({"question": "q", "answer": "a")"
                                                   "\n");
  ExpectCorpusError(Kind::kGsm8k, broken, Code::kInvalidJson,
                    {"broken.jsonl: line 2: invalid JSON at column"});
  const std::string scalar = Write("scalar.jsonl", "\"just a string\"\n");
  ExpectCorpusError(Kind::kGsm8k, scalar, Code::kBadRecord,
                    {"scalar.jsonl: line 1: record is a string, expected an object"});
}

TEST_F(CorporaTest, InvalidJsonArrayNamesRecordAndLineEvenWithSkipBad) {
  const std::string path = Write("alpaca_data.json",
                                 "[\n"
                                 R"(  {"instruction": "a", "input": "", "output": "b"},)"
                                 "\n"
                                 R"(  {"instruction": "c", "input": "", "output": "d"},)"
                                 "\n"
                                 R"(  {"instruction": "e", "input": "" "output": "f"})"
                                 "\n"
                                 "]\n");
  ReadOptions skip;
  skip.skip_bad = true;
  for (const ReadOptions& options : {ReadOptions{}, skip}) {
    ExpectCorpusError(Kind::kAlpaca, path, Code::kInvalidJson,
                      {"alpaca_data.json: record 2: invalid JSON at line 4, column"}, options);
  }
  const std::string truncated = Write("truncated.json", R"([{"instruction": "a", "output": "b"},)");
  ExpectCorpusError(Kind::kAlpaca, truncated, Code::kInvalidJson,
                    {"truncated.json", "invalid JSON"});
}

TEST_F(CorporaTest, SkipBadCountsAndKeepsFirstFiveMessages) {
  std::string jsonl;
  for (int i = 0; i < 10; ++i) {
    if (i % 3 == 0) {
      jsonl += R"({"question": "q)" + std::to_string(i) +
               R"(", "answer": "a"})"
               "\n";
    } else if (i % 3 == 1) {
      jsonl += R"({"question": "q"})"
               "\n";  // answer missing
    } else {
      jsonl += "{not json\n";
    }
  }
  ReadOptions options;
  options.skip_bad = true;
  const ReadResult result = Read(Kind::kGsm8k, Write("mixed.jsonl", jsonl), options);
  EXPECT_EQ(result.stats.records, 10u);
  EXPECT_EQ(result.stats.documents, 4u);  // lines 1, 4, 7, 10
  EXPECT_EQ(result.stats.skipped, 6u);
  ASSERT_EQ(result.stats.skip_examples.size(), ReadStats::kMaxSkipExamples);
  EXPECT_NE(result.stats.skip_examples[0].find("mixed.jsonl: line 2: field 'answer': missing"),
            std::string::npos);
  EXPECT_NE(result.stats.skip_examples[1].find("mixed.jsonl: line 3: invalid JSON"),
            std::string::npos);
  EXPECT_EQ(result.documents.front(), "q0\na");
  EXPECT_EQ(result.documents.back(), "q9\na");

  const std::string array = Write("array.json", R"([{"instruction": "a", "output": "b"},
    {"instruction": "c"}, 5, {"instruction": "d", "output": "e"}])");
  const ReadResult array_result = Read(Kind::kAlpaca, array, options);
  EXPECT_EQ(array_result.documents, (std::vector<std::string>{"a\nb", "d\ne"}));
  EXPECT_EQ(array_result.stats.records, 4u);
  EXPECT_EQ(array_result.stats.skipped, 2u);
  EXPECT_EQ(
      array_result.stats.skip_examples,
      (std::vector<std::string>{array + ": record 1: field 'output': missing",
                                array + ": record 2: record is a number, expected an object"}));
}

TEST_F(CorporaTest, SkipReasonsAreCountedAndDescribed) {
  // 9 records, all bad: 3 invalid JSON (lines 1, 4, 7), 6 without an answer.
  std::string jsonl;
  for (int i = 0; i < 9; ++i) jsonl += i % 3 == 0 ? "{bad\n" : "{\"question\": \"q\"}\n";
  const std::string path = Write("allbad.jsonl", jsonl);
  ReadOptions options;
  options.skip_bad = true;
  const ReadResult result = Read(Kind::kGsm8k, path, options);
  EXPECT_TRUE(result.documents.empty());
  EXPECT_EQ(result.stats.skipped, 9u);
  EXPECT_EQ(result.stats.skipped_by_code,
            (std::map<Code, uint64_t>{{Code::kInvalidJson, 3}, {Code::kBadRecord, 6}}));
  const std::string& e = result.stats.skip_examples[0];  // the JSON detail is nlohmann's
  EXPECT_EQ(e.rfind(path + ": line 1: invalid JSON at column ", 0), 0u) << e;
  EXPECT_EQ(DescribeSkips(result.stats),
            "skipped 9 of 9 records (invalid JSON: 3, bad record: 6), e.g. " + e + "; " + path +
                ": line 2: field 'answer': missing; " + path + ": line 3: field 'answer': missing; " +
                result.stats.skip_examples[3] + "; " + path +
                ": line 5: field 'answer': missing; and 4 more");
  EXPECT_EQ(result.stats.skip_examples[3].rfind(path + ": line 4: invalid JSON", 0), 0u);
  EXPECT_EQ(DescribeSkips(Read(Kind::kGsm8k, Write("ok.jsonl", "{\"question\": \"q\", "
                                                               "\"answer\": \"a\"}\n"))
                              .stats),
            "");
}

TEST_F(CorporaTest, SinkExceptionsPropagateUnchanged) {
  ReadOptions options;
  options.skip_bad = true;
  const std::string path = Write("alpaca.json", kAlpacaArray);
  EXPECT_THROW(ReadCorpus(Kind::kAlpaca, path, options,
                          [](std::string&&) { throw std::logic_error("sink failed"); }),
               std::logic_error);
}

TEST_F(CorporaTest, MissingFileAndDirectory) {
  const std::string missing = (dir_ / "nope.json").string();
  ExpectCorpusError(Kind::kAlpaca, missing, Code::kIo, {"nope.json", "cannot open"});
  ExpectCorpusError(Kind::kText, missing, Code::kIo, {"nope.json", "cannot open"});
  ExpectCorpusError(Kind::kGsm8k, dir_.string(), Code::kIo, {dir_.string(), "is a directory"});
  ExpectError([&] { ReadIdDocuments(missing, 10, false, [](std::vector<uint32_t>&&) {}); },
              Code::kIo, {"nope.json"});
  // Every kind but text refuses a directory by name; ids too.
  for (Kind kind : AllKinds()) {
    if (kind == Kind::kText) continue;
    ExpectCorpusError(kind, dir_.string(), Code::kIo,
                      {dir_.string() + ": is a directory, expected a file"});
  }
  ExpectError([&] { ReadIdDocuments(dir_.string(), 10, false, [](std::vector<uint32_t>&&) {}); },
              Code::kIo, {dir_.string() + ": is a directory, expected a file"});
  // Devices are refused, not read (reading /dev/zero would never end).
  for (Kind kind : AllKinds()) {
    ExpectCorpusError(kind, "/dev/zero", Code::kIo,
                      {"/dev/zero: is a character device, expected a file or a pipe"});
  }
}

// Streams: the same bytes through an anonymous pipe (named /dev/fd/N, as `<(cat f)` names it)
// and through a FIFO give the same documents as the regular file.
class StreamTest : public CorporaTest {
 protected:
  // Reads `content` as `kind` from a pipe written by another thread.
  ReadResult ReadFromPipe(Kind kind, const std::string& content, const ReadOptions& options) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    std::thread writer([&] { WriteAll(fds[1], content); });
    ReadResult result;
    try {
      result = Read(kind, "/dev/fd/" + std::to_string(fds[0]), options);
    } catch (...) {
      writer.join();
      ::close(fds[0]);
      throw;
    }
    writer.join();
    ::close(fds[0]);
    return result;
  }
  ReadResult ReadFromFifo(Kind kind, const std::string& content, const ReadOptions& options) {
    const std::string fifo = (dir_ / ("f" + std::to_string(fifo_count_++))).string();
    EXPECT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::thread writer([&] {
      const int fd = ::open(fifo.c_str(), O_WRONLY);
      if (fd >= 0) WriteAll(fd, content);
    });
    ReadResult result = Read(kind, fifo, options);
    writer.join();
    return result;
  }
  static void WriteAll(int fd, const std::string& content) {
    for (size_t at = 0; at < content.size();) {
      const ssize_t n = ::write(fd, content.data() + at, content.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    ::close(fd);
  }
  int fifo_count_ = 0;
};

TEST_F(StreamTest, PipesAndFifosReadLikeFiles) {
  // Large enough (> 64 KiB) that the writer blocks until the reader drains the pipe.
  std::string jsonl, array = "[", text;
  for (int i = 0; i < 3000; ++i) {
    const std::string record = R"({"instruction": "task )" + std::to_string(i) +
                               R"(", "input": "", "output": "done )" + std::to_string(i) + "\"}";
    jsonl += record + "\n";
    array += (i ? ",\n" : "\n") + record;
    text += "block " + std::to_string(i) + "\nsecond line\n\n";
  }
  array += "]";
  ReadOptions blank_line;
  blank_line.text_split = TextSplit::kBlankLine;
  const struct {
    Kind kind;
    std::string content;
    ReadOptions options;
  } cases[] = {{Kind::kAlpaca, jsonl, {}},
               {Kind::kAlpaca, "\xEF\xBB\xBF  " + array, {}},
               {Kind::kText, text, blank_line},
               {Kind::kText, text, {}}};
  for (const auto& c : cases) {
    const ReadResult want = Read(c.kind, Write("regular", c.content), c.options);
    ASSERT_GT(want.documents.size(), 0u);
    const ReadResult piped = ReadFromPipe(c.kind, c.content, c.options);
    EXPECT_EQ(piped.documents, want.documents);
    EXPECT_EQ(piped.stats.records, want.stats.records);
    const ReadResult fifo = ReadFromFifo(c.kind, c.content, c.options);
    EXPECT_EQ(fifo.documents, want.documents);
  }
  // Token ids from a pipe.
  std::string ids;
  for (int i = 0; i < 20000; ++i) ids += "[1, 2, " + std::to_string(i % 10) + "]\n";
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::thread writer([&] { WriteAll(fds[1], ids); });
  uint64_t documents = 0;
  const ReadStats stats = ReadIdDocuments("/dev/fd/" + std::to_string(fds[0]), 10, false,
                                          [&](std::vector<uint32_t>&&) { ++documents; });
  writer.join();
  ::close(fds[0]);
  EXPECT_EQ(documents, 20000u);
  EXPECT_EQ(stats.records, 20000u);
  // Input::Open classifies and keeps a stream's bytes.
  ASSERT_EQ(::pipe(fds), 0);
  std::thread small_writer([&] { WriteAll(fds[1], "[1]\n"); });
  Input input = Input::Open("/dev/fd/" + std::to_string(fds[0]));
  small_writer.join();
  ::close(fds[0]);
  EXPECT_EQ(input.type(), Input::Type::kStream);
  EXPECT_EQ(input.stream_bytes(), "[1]\n");
  EXPECT_EQ(Input::Open(dir_.string()).type(), Input::Type::kDirectory);
  EXPECT_EQ(Input::Open(Write("x", "")).type(), Input::Type::kFile);
}

// ---------------------------------------------------------------------------------------------
// One UTF-8 policy: every kind rejects invalid UTF-8 (as a malformed record) and accepts valid.

TEST_F(CorporaTest, InvalidUtf8IsRejectedByEveryKindAndValidAccepted) {
  // Independent oracle: RFC 3629's table, written out case by case.
  const struct {
    std::string bytes;
    bool valid;
  } cases[] = {
      {"\xE2\x82\xAC", true},          // U+20AC
      {"\xF0\x9D\x84\x9E", true},      // U+1D11E
      {"\xF4\x8F\xBF\xBF", true},      // U+10FFFF, the last code point
      {"\xED\x9F\xBF", true},          // U+D7FF, just below the surrogates
      {"\xC3\xA9", true},              // U+00E9
      {"\xC0\x80", false},             // overlong NUL
      {"\xC1\xBF", false},             // overlong
      {"\xE0\x80\x80", false},         // overlong
      {"\xED\xA0\x80", false},         // surrogate U+D800
      {"\xF4\x90\x80\x80", false},     // above U+10FFFF
      {"\xF5\x80\x80\x80", false},     // invalid lead
      {"\x80", false},                 // lone continuation
      {"\xE2\x82", false},             // truncated
      {"\xE2\x82x", false},            // truncated before ASCII
      {"\xFF", false},
  };
  ReadOptions skip;
  skip.skip_bad = true;
  ReadOptions blank_skip = skip;
  blank_skip.text_split = TextSplit::kBlankLine;
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.bytes));
    const std::string text_doc = "ok\nab" + c.bytes + "c";
    const std::string text = Write("t.txt", text_doc);
    const std::string json = Write("g.jsonl", "{\"question\": \"q\", \"answer\": \"ab" +
                                                  c.bytes + "c\"}\n");
    const std::string array = Write("a.json", "[{\"instruction\": \"ab" + c.bytes +
                                                  "c\", \"output\": \"o\"}]");
    if (c.valid) {
      EXPECT_EQ(Read(Kind::kText, text).documents, std::vector<std::string>{text_doc});
      EXPECT_EQ(Read(Kind::kGsm8k, json).documents,
                std::vector<std::string>{"q\nab" + c.bytes + "c"});
      EXPECT_EQ(Read(Kind::kAlpaca, array).documents,
                std::vector<std::string>{"ab" + c.bytes + "c\no"});
      continue;
    }
    // Rejected, naming the file and the line (text: and the column of the bad byte).
    ExpectCorpusError(Kind::kText, text, Code::kBadValue,
                      {text + ": line 2: invalid UTF-8 at column 3 (byte 0x"});
    ReadOptions blank_line;
    blank_line.text_split = TextSplit::kBlankLine;
    ExpectCorpusError(Kind::kText, text, Code::kBadValue,
                      {text + ": line 2: invalid UTF-8 at column 3"}, blank_line);
    ExpectCorpusError(Kind::kGsm8k, json, Code::kInvalidJson, {json + ": line 1: invalid JSON"});
    ExpectCorpusError(Kind::kAlpaca, array, Code::kInvalidJson, {array + ": "});
    // With skip_bad, a skipped record, like any malformed record (a JSON array that does not
    // parse stays an error: its record boundaries are unknown).
    const ReadResult text_skipped = Read(Kind::kText, text, skip);
    EXPECT_TRUE(text_skipped.documents.empty());
    EXPECT_EQ(text_skipped.stats.skipped_by_code, (std::map<Code, uint64_t>{{Code::kBadValue, 1}}));
    const std::string blocks = Write("b.txt", "good one\n\nbad" + c.bytes + "\nmore\n\nlast");
    const ReadResult block_skipped = Read(Kind::kText, blocks, blank_skip);
    EXPECT_EQ(block_skipped.documents, (std::vector<std::string>{"good one", "last"}));
    EXPECT_EQ(block_skipped.stats.records, 3u);
    EXPECT_EQ(block_skipped.stats.skipped, 1u);
    const ReadResult json_skipped = Read(Kind::kGsm8k, json, skip);
    EXPECT_TRUE(json_skipped.documents.empty());
    EXPECT_EQ(json_skipped.stats.skipped, 1u);
  }
}

// ---------------------------------------------------------------------------------------------
// Presets, on a data folder laid out exactly as corpora/fetch.sh lays it out.

// The layout paths corpora/fetch.sh writes: the LAYOUT_PATH of every `fetch URL LAYOUT_PATH` and
// `fetch_gz URL LAYOUT_PATH` call, and the target of every `mv -f "$dest/X.part" "$dest/X"`.
std::set<std::string> FetchShLayout() {
  std::ifstream in(std::string(SAM_CORPORA_SOURCE_DIR) + "/fetch.sh");
  std::stringstream buffer;
  buffer << in.rdbuf();
  // Continued lines joined (a backslash, the newline and the next line's
  // indentation become one space). Plain string code rather than std::regex,
  // inside which GCC 12 warns falsely in an ASan build.
  std::string script;
  const std::string raw = buffer.str();
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\\' && i + 1 < raw.size() && raw[i + 1] == '\n') {
      i += 2;
      while (i < raw.size() && std::isspace(static_cast<unsigned char>(raw[i]))) ++i;
      script += ' ';
      --i;
    } else {
      script += raw[i];
    }
  }
  std::set<std::string> paths;
  std::istringstream lines(script);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string command, url, path;
    if (words >> command >> url >> path && (command == "fetch" || command == "fetch_gz") &&
        (line.rfind("fetch ", 0) == 0 || line.rfind("fetch_gz ", 0) == 0))
      paths.insert(path);
  }
  const std::string move = "mv -f \"$dest/", part = ".part\" \"$dest/";
  for (size_t at = script.find(move); at != std::string::npos; at = script.find(move, at + 1)) {
    const size_t from_end = script.find('"', at + move.size());
    if (from_end == std::string::npos || from_end < at + move.size() + 6 ||
        script.compare(from_end - 5, part.size(), part) != 0)
      continue;
    const size_t to = from_end - 5 + part.size();
    const size_t to_end = script.find('"', to);
    if (to_end != std::string::npos && to_end > to) paths.insert(script.substr(to, to_end - to));
  }
  return paths;
}

class PresetTest : public CorporaTest {
 protected:
  // One small valid file per fetch.sh layout path, by the schema its folder holds.
  void WriteFetchedLayout(const std::set<std::string>& layout) {
    for (const std::string& rel : layout) {
      const std::string folder = rel.substr(0, rel.find('/'));
      std::string content = "licence or binary data";
      if (rel.ends_with(".json") && (folder == "alpaca" || folder == "code_alpaca")) {
        content = kAlpacaArray;
      } else if (folder == "gsm8k" && rel.ends_with(".jsonl")) {
        content = R"({"question": "q", "answer": "a"})" "\n";
      } else if (folder == "python18k" && rel.ends_with(".jsonl")) {
        content = R"({"instruction": "i", "input": "", "output": "o", "prompt": "p"})" "\n";
      } else if (folder == "hagrid" && rel.ends_with(".jsonl")) {
        content = kHagrid;
      } else if (rel.ends_with(".jsonl")) {
        content = R"({"text": "t"})" "\n";
      }
      Write("data/" + rel, content);
    }
  }
  std::string data() const { return (dir_ / "data").string(); }
};

TEST_F(PresetTest, DefaultPresetFindsEveryCorpusFetchShLaysOut) {
  const std::set<std::string> layout = FetchShLayout();
  // The script's layout, as corpora/README.md documents it (a sanity check of the parsing).
  for (const char* rel : {"alpaca/alpaca_data.json", "code_alpaca/code_alpaca_2k.json",
                          "code_alpaca/new_codealpaca.json", "gsm8k/train.jsonl",
                          "python18k/train.jsonl", "python18k/train.parquet",
                          "hagrid/train.jsonl", "tokenizer/llama-32k.model"}) {
    EXPECT_TRUE(layout.count(rel)) << rel << " not written by fetch.sh";
  }
  // Every preset entry is a path fetch.sh writes (or, for a pattern, matches one).
  for (std::string_view preset : PresetNames()) {
    for (const PresetEntry& entry : PresetTable(preset)) {
      const std::string rel(entry.relative_path);
      const size_t star = rel.find("/*");
      const bool written =
          star == std::string::npos
              ? layout.count(rel) > 0
              : std::any_of(layout.begin(), layout.end(), [&](const std::string& path) {
                  return path.rfind(rel.substr(0, star + 1), 0) == 0 &&
                         path.ends_with(rel.substr(star + 2));
                });
      EXPECT_TRUE(written) << "preset " << preset << ": " << rel << " is not in fetch.sh";
    }
  }
  WriteFetchedLayout(layout);
  const ResolvedPreset resolved = ResolvePreset("default", data());
  EXPECT_TRUE(resolved.notes.empty());
  std::vector<std::pair<Kind, std::string>> got;
  for (const auto& corpus : resolved.corpora) got.emplace_back(corpus.kind, corpus.path);
  const std::string d = data() + "/";
  EXPECT_EQ(got, (std::vector<std::pair<Kind, std::string>>{
                     {Kind::kAlpaca, d + "alpaca/alpaca_data.json"},
                     {Kind::kAlpaca, d + "code_alpaca/code_alpaca_2k.json"},
                     {Kind::kAlpaca, d + "code_alpaca/new_codealpaca.json"},
                     {Kind::kPython18k, d + "python18k/train.jsonl"},
                     {Kind::kGsm8k, d + "gsm8k/train.jsonl"},
                     {Kind::kHagrid, d + "hagrid/train.jsonl"}}));
  // Each resolved corpus reads as its kind.
  for (const auto& corpus : resolved.corpora) {
    EXPECT_GT(Read(corpus.kind, corpus.path).documents.size(), 0u) << corpus.path;
  }
  const ResolvedPreset gsm8k = ResolvePreset("gsm8k", data());
  ASSERT_EQ(gsm8k.corpora.size(), 1u);
  EXPECT_EQ(gsm8k.corpora[0].path, d + "gsm8k/train.jsonl");
}

TEST_F(PresetTest, MissingCorporaAreReportedNotSilentlyLeftOut) {
  WriteFetchedLayout(FetchShLayout());
  // Optional corpora: left out with a note; the unconverted parquet file is pointed out.
  fs::remove(dir_ / "data/python18k/train.jsonl");
  fs::remove(dir_ / "data/hagrid/train.jsonl");
  const ResolvedPreset resolved = ResolvePreset("default", data());
  EXPECT_EQ(resolved.corpora.size(), 4u);
  ASSERT_EQ(resolved.notes.size(), 2u);
  EXPECT_EQ(resolved.notes[0].rfind("preset 'default': optional python18k/train.jsonl not found "
                                    "under " + data() + "; left out (python18k/train.parquet is "
                                    "there but was not converted",
                                    0),
            0u)
      << resolved.notes[0];
  EXPECT_EQ(resolved.notes[1],
            "preset 'default': optional hagrid/train.jsonl not found under " + data() +
                "; left out");
  fs::remove(dir_ / "data/python18k/train.parquet");
  EXPECT_EQ(ResolvePreset("default", data()).notes[0],
            "preset 'default': optional python18k/train.jsonl not found under " + data() +
                "; left out");
  // Required corpora: an error naming every one missing.
  fs::remove(dir_ / "data/gsm8k/train.jsonl");
  fs::remove_all(dir_ / "data/code_alpaca");
  ExpectError([&] { ResolvePreset("default", data()); }, Code::kIo,
              {data() + ": preset 'default' needs code_alpaca/*.json, gsm8k/train.jsonl, missing"});
  ExpectError([&] { ResolvePreset("gsm8k", data()); }, Code::kIo,
              {"preset 'gsm8k' needs gsm8k/train.jsonl"});
  ExpectError([&] { ResolvePreset("default", (dir_ / "absent").string()); }, Code::kIo,
              {"absent: data folder not found"});
  ExpectError([&] { ResolvePreset("everything", data()); }, Code::kInvalidArgument,
              {"unknown preset 'everything' (valid: default, gsm8k)"});
}

// ---------------------------------------------------------------------------------------------
// Encodings and layout.

TEST_F(CorporaTest, ByteOrderMarkIsTolerated) {
  const std::string bom = "\xEF\xBB\xBF";
  EXPECT_EQ(Read(Kind::kAlpaca, Write("bom.json", bom + kAlpacaArray)).documents.size(), 2u);
  const ReadResult jsonl =
      Read(Kind::kGsm8k, Write("bom.jsonl", bom + R"({"question": "q", "answer": "a"})"
                                                  "\n"));
  EXPECT_EQ(jsonl.documents, (std::vector<std::string>{"q\na"}));
  EXPECT_EQ(Read(Kind::kText, Write("bom.txt", bom + "text\n")).documents,
            (std::vector<std::string>{"text"}));
}

TEST_F(CorporaTest, EmptyAndWhitespaceLinesAndCrlf) {
  const std::string path = Write("crlf.jsonl",
                                 "\r\n"
                                 R"({"question": "q1", "answer": "a1"})"
                                 "\r\n"
                                 "   \t\r\n"
                                 "\n"
                                 R"({"question": "q2", "answer": "a2"})"
                                 "\r\n"
                                 R"({"question": "q3"})");  // no final newline
  ExpectCorpusError(Kind::kGsm8k, path, Code::kBadRecord, {"crlf.jsonl: line 6:"});
  ReadOptions options;
  options.skip_bad = true;
  const ReadResult result = Read(Kind::kGsm8k, path, options);
  EXPECT_EQ(result.documents, (std::vector<std::string>{"q1\na1", "q2\na2"}));
  EXPECT_EQ(result.stats.records, 3u);
  EXPECT_EQ(result.stats.skipped, 1u);
  EXPECT_EQ(Read(Kind::kGsm8k, Write("empty.jsonl", "")).stats.records, 0u);
  EXPECT_EQ(Read(Kind::kAlpaca, Write("empty.json", " [ ] ")).stats.records, 0u);
}

TEST_F(CorporaTest, LongLinesAndManyLinesAcrossReadBlocks) {
  // One 3 MB line (larger than the reader's block) and enough lines to cross block boundaries.
  const std::string long_text(3 << 20, 'x');
  std::string jsonl = R"({"text": ")" + long_text + "\"}\n";
  constexpr int kLines = 40000;
  for (int i = 0; i < kLines; ++i) jsonl += R"({"text": "line )" + std::to_string(i) + "\"}\n";
  jsonl += "{\"text\": 1}\n";
  const std::string path = Write("long.jsonl", jsonl);
  ExpectCorpusError(Kind::kJsonl, path, Code::kBadRecord,
                    {"long.jsonl: line " + std::to_string(kLines + 2) + ": field 'text'"});
  ReadOptions options;
  options.skip_bad = true;
  const ReadResult result = Read(Kind::kJsonl, path, options);
  ASSERT_EQ(result.documents.size(), size_t{kLines + 1});
  EXPECT_EQ(result.documents[0], long_text);
  EXPECT_EQ(result.documents[1], "line 0");
  EXPECT_EQ(result.documents[kLines], "line " + std::to_string(kLines - 1));
}

TEST_F(CorporaTest, TextPerFileAndBlankLineSplit) {
  const std::string path =
      Write("doc.txt", "para one\nstill one\n\n  \n\npara two\r\n\r\npara 3\n\n");
  const ReadResult per_file = Read(Kind::kText, path);
  EXPECT_EQ(per_file.documents,
            (std::vector<std::string>{"para one\nstill one\n\n  \n\npara two\r\n\r\npara 3"}));
  ReadOptions blank;
  blank.text_split = TextSplit::kBlankLine;
  const ReadResult blocks = Read(Kind::kText, path, blank);
  EXPECT_EQ(blocks.documents,
            (std::vector<std::string>{"para one\nstill one", "para two", "para 3"}));
  EXPECT_EQ(blocks.stats.records, 3u);
  EXPECT_EQ(blocks.stats.documents, 3u);
  const ReadResult empty = Read(Kind::kText, Write("blank.txt", " \n\n"));
  EXPECT_TRUE(empty.documents.empty());
  EXPECT_EQ(empty.stats.records, 1u);
  EXPECT_TRUE(Read(Kind::kText, Write("blank2.txt", "\n \n"), blank).documents.empty());
}

TEST_F(CorporaTest, TextDirectoryInSortedOrder) {
  Write("texts/b.txt", "second\n\nthird");
  Write("texts/a.txt", "first");
  Write("texts/c.txt", "");
  Write("texts/d.md", "not text");
  Write("texts/sub.txt/e.txt", "in a subdirectory");
  const std::string directory = (dir_ / "texts").string();
  const ReadResult per_file = Read(Kind::kText, directory);
  EXPECT_EQ(per_file.documents, (std::vector<std::string>{"first", "second\n\nthird"}));
  EXPECT_EQ(per_file.stats.records, 3u);  // a, b, c (empty: no document)
  EXPECT_EQ(per_file.stats.documents, 2u);
  ReadOptions blank;
  blank.text_split = TextSplit::kBlankLine;
  EXPECT_EQ(Read(Kind::kText, directory, blank).documents,
            (std::vector<std::string>{"first", "second", "third"}));
  fs::create_directories(dir_ / "none");
  ExpectCorpusError(Kind::kText, (dir_ / "none").string(), Code::kInvalidArgument,
                    {"none", "no *.txt files"});
}

// ---------------------------------------------------------------------------------------------
// Token-id documents.

struct IdResult {
  std::vector<std::vector<uint32_t>> documents;
  ReadStats stats;
};

IdResult ReadIds(const std::string& path, uint32_t vocab_size, bool skip_bad = false) {
  IdResult result;
  result.stats = ReadIdDocuments(path, vocab_size, skip_bad, [&](std::vector<uint32_t>&& ids) {
    result.documents.push_back(std::move(ids));
  });
  return result;
}

void ExpectIdError(const std::string& path, uint32_t vocab_size, Code code,
                   std::initializer_list<std::string> parts) {
  ExpectError([&] { ReadIds(path, vocab_size); }, code, parts);
}

TEST_F(CorporaTest, IdDocumentsValid) {
  const IdResult result = ReadIds(Write("ids.jsonl", "[1, 2, 3]\n\n[]\n[0, 31999]\n"), 32000);
  EXPECT_EQ(result.documents, (std::vector<std::vector<uint32_t>>{{1, 2, 3}, {0, 31999}}));
  EXPECT_EQ(result.stats.records, 3u);
  EXPECT_EQ(result.stats.documents, 2u);
  // Always JSONL, even when the first line holds nested arrays.
  ExpectIdError(Write("nested.jsonl", "[[5], [6, 7]]\n"), 8, Code::kBadRecord,
                {"nested.jsonl: line 1: element 0: value [5] is not an integer token id"});
}

TEST_F(CorporaTest, IdDocumentsErrors) {
  ExpectIdError(Write("range.jsonl", "[1, 2]\n[3, 32000]\n"), 32000, Code::kBadValue,
                {"range.jsonl: line 2: element 1: value 32000 is out of range (vocab size 32000)"});
  ExpectIdError(Write("huge.jsonl", "[18446744073709551615]\n"), 32000, Code::kBadValue,
                {"huge.jsonl: line 1: element 0: value 18446744073709551615 is out of range"});
  ExpectIdError(Write("negative.jsonl", "[4, -1]\n"), 10, Code::kBadValue,
                {"negative.jsonl: line 1: element 1: value -1 is negative"});
  ExpectIdError(Write("float.jsonl", "[1.5]\n"), 10, Code::kBadRecord,
                {"float.jsonl: line 1: element 0: value 1.5 is not an integer token id"});
  ExpectIdError(Write("string.jsonl", "[1, \"2\"]\n"), 10, Code::kBadRecord,
                {"string.jsonl: line 1: element 1: value \"2\" is not an integer token id"});
  ExpectIdError(Write("object.jsonl", "{\"ids\": [1]}\n"), 10, Code::kBadRecord,
                {"object.jsonl: line 1: record is an object, expected an array of token ids"});
  ExpectIdError(Write("broken.jsonl", "[1, 2\n"), 10, Code::kInvalidJson,
                {"broken.jsonl: line 1: invalid JSON"});
  ExpectIdError(Write("zero.jsonl", "[1]\n"), 0, Code::kInvalidArgument, {"vocab size"});
}

TEST_F(CorporaTest, IdDocumentsSkipBad) {
  const IdResult result =
      ReadIds(Write("ids.jsonl", "[1]\n[99]\n[-2]\n[2, 3]\nnope\n[0.5]\n[4]\n"), 10, true);
  EXPECT_EQ(result.documents, (std::vector<std::vector<uint32_t>>{{1}, {2, 3}, {4}}));
  EXPECT_EQ(result.stats.records, 7u);
  EXPECT_EQ(result.stats.documents, 3u);
  EXPECT_EQ(result.stats.skipped, 4u);
  EXPECT_EQ(result.stats.skip_examples.size(), 4u);
}

// ---------------------------------------------------------------------------------------------
// The real corpora, when the shared data folder is present.

std::string DataDir() {
  if (const char* env = std::getenv("SAM_DATA_DIR"); env != nullptr && *env != '\0') return env;
  return SAM_DEFAULT_DATA_DIR;
}

// Reads `path` with `kind`, checks that every document is non-empty, returns the stats.
ReadStats ReadRealCorpus(Kind kind, const std::string& path, Template templ) {
  ReadOptions options;
  options.templ = templ;
  uint64_t empty = 0;
  const ReadStats stats = ReadCorpus(kind, path, options, [&](std::string&& document) {
    if (document.empty()) ++empty;
  });
  EXPECT_EQ(empty, 0u) << path;
  EXPECT_EQ(stats.skipped, 0u) << path;
  return stats;
}

TEST(RealDataTest, CountsAndNonEmptyDocuments) {
  const fs::path data = DataDir();
  if (!fs::exists(data / "alpaca" / "alpaca_data.json")) {
    GTEST_SKIP() << "real corpora not found under " << data
                 << " (set SAM_DATA_DIR to a folder laid out as in corpora/README.md)";
  }
  for (Template templ : {Template::kRaw, Template::kVicuna}) {
    const ReadStats alpaca =
        ReadRealCorpus(Kind::kAlpaca, (data / "alpaca" / "alpaca_data.json").string(), templ);
    EXPECT_EQ(alpaca.records, 52002u);
    EXPECT_EQ(alpaca.documents, 52002u);
  }
  for (const auto& [name, count] : std::initializer_list<std::pair<const char*, uint64_t>>{
           {"train.jsonl", 7473}, {"test.jsonl", 1319}}) {
    const fs::path path = data / "gsm8k" / name;
    if (!fs::exists(path)) continue;
    const ReadStats gsm8k = ReadRealCorpus(Kind::kGsm8k, path.string(), Template::kVicuna);
    EXPECT_EQ(gsm8k.records, count) << path;
    EXPECT_EQ(gsm8k.documents, count) << path;
  }
  if (fs::is_directory(data / "code_alpaca")) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(data / "code_alpaca")) {
      if (entry.path().extension() == ".json") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& path : files) {
      const ReadStats code = ReadRealCorpus(Kind::kAlpaca, path.string(), Template::kRaw);
      EXPECT_GT(code.records, 0u) << path;
      EXPECT_EQ(code.documents, code.records) << path;
      std::cout << "[ info     ] " << path.filename().string() << ": " << code.records
                << " records\n";
      RecordProperty(path.filename().string(), std::to_string(code.records));
    }
  }
  // HumanEval: its prompts as plain JSONL documents.
  if (const fs::path humaneval = data / "humaneval" / "HumanEval.jsonl"; fs::exists(humaneval)) {
    ReadOptions options;
    options.text_field = "prompt";
    const ReadStats stats =
        ReadCorpus(Kind::kJsonl, humaneval.string(), options, [](std::string&&) {});
    EXPECT_EQ(stats.records, 164u);
    EXPECT_EQ(stats.documents, 164u);
  }
}

}  // namespace
}  // namespace sam::corpora
