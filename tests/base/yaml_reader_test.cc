// Tests base/yaml_reader.h: typed reads, unknown keys, and error positions and messages.
#include "base/yaml_reader.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace paceline {
namespace {

// Runs `body` and returns the InputError message it throws ("" if none).
template <typename Body>
std::string error_of(Body body) {
  try {
    body();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(YamlReader, ReadsTypedValues) {
  const YamlDocument doc = load_yaml_text("a: 8\nb: 2.5\nc: true\nd: 900 GB/s\ne: hello\n", "t.yaml");
  YamlMap root(doc.root, doc.file, "");
  EXPECT_EQ(root.required<int>("a"), 8);
  EXPECT_DOUBLE_EQ(root.required<double>("b"), 2.5);
  EXPECT_TRUE(root.required<bool>("c"));
  EXPECT_DOUBLE_EQ(root.required<BytesPerSecond>("d") / GBPerSecond(1), 900.0);
  EXPECT_EQ(root.required<std::string>("e"), "hello");
  EXPECT_EQ(root.get<int>("missing", 3), 3);
  root.finish();
}

TEST(YamlReader, AnEmptyValueIsCitedAtItsKey) {
  // At the end of a line the parser marks an empty value where the next token starts, a line
  // below; written null, or empty inside braces, it has its own place.
  const YamlDocument doc = load_yaml_text("name:\nb: null\nc: {d: }\n", "e.yaml");
  YamlMap root(doc.root, doc.file, "");
  EXPECT_EQ(error_of([&] { root.required<std::string>("name"); }), "e.yaml:1:1: name has no value; expected a string");
  EXPECT_EQ(error_of([&] { root.required<int>("b"); }), "e.yaml:2:4: b has no value; expected an integer");
  YamlMap c = root.map("c");
  EXPECT_EQ(error_of([&] { c.required<int>("d"); }), "e.yaml:3:8: c.d has no value; expected an integer");
  // An empty mapping; an empty value on the last line, without a newline after it.
  const YamlDocument end = load_yaml_text("a: 1\nm:\nz: 2\nn:\n  last:", "f.yaml");
  YamlMap tail(end.root, end.file, "");
  EXPECT_EQ(error_of([&] { tail.map("m"); }), "f.yaml:2:1: m is empty; expected a mapping of keys to values");
  YamlMap n = tail.map("n");
  EXPECT_EQ(error_of([&] { n.required<int>("last"); }), "f.yaml:5:3: n.last has no value; expected an integer");
}

TEST(YamlReader, ReadsListsOfScalars) {
  const YamlDocument doc = load_yaml_text("a: [1, 2, 3]\nb: 4\nc: [1, x]\n", "l.yaml");
  YamlMap root(doc.root, doc.file, "");
  EXPECT_EQ(root.list<int>("a", "must be a list"), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(error_of([&] { root.list<int>("b", "must be a list of counts"); }),
            "l.yaml:2:4: b = 4 must be a list of counts");
  EXPECT_EQ(error_of([&] { root.list<int>("c", "must be a list"); }), "l.yaml:3:8: c[1] = 'x' is not an integer");
}

TEST(YamlReader, FieldsSetAfterParsingCiteTheirOrigin) {
  // b and d (and all inside them) stand for values a --set put in; a keeps its line.
  const YamlDocument doc = load_yaml_text("a: 1\nb: {c: x, e: 2}\nd: [1, y]\n", "o.yaml");
  auto origins = std::make_shared<FieldOrigins>();
  origins->emplace("b", SourceLocation{"--set b={c: x, e: 2}"});
  origins->emplace("d", SourceLocation{"--set d=[1, y]"});
  YamlMap root(doc.root, doc.file, "", origins);
  EXPECT_EQ(error_of([&] { root.fail("a", "is wrong"); }), "o.yaml:1:4: a = 1 is wrong");
  YamlMap b = root.map("b");
  EXPECT_EQ(error_of([&] { b.required<int>("c"); }), "--set b={c: x, e: 2}: b.c = 'x' is not an integer");
  EXPECT_EQ(error_of([&] { b.fail_here("is wrong"); }), "--set b={c: x, e: 2}: b: is wrong");
  EXPECT_EQ(error_of([&] { b.finish(); }).rfind("--set b={c: x, e: 2}: unknown key 'e' in b", 0), 0u);
  EXPECT_EQ(error_of([&] { root.list<int>("d", "must be a list"); }), "--set d=[1, y]: d[1] = 'y' is not an integer");
}

TEST(YamlReader, BooleansAreYaml12s) {
  const YamlDocument doc = load_yaml_text("a: TRUE\nb: False\nc: yes\nd: on\n", "b.yaml");
  YamlMap root(doc.root, doc.file, "");
  EXPECT_TRUE(root.required<bool>("a"));
  EXPECT_FALSE(root.required<bool>("b"));
  EXPECT_EQ(error_of([&] { root.required<bool>("c"); }), "b.yaml:3:4: c = 'yes' is not a boolean; expected true or false");
  EXPECT_EQ(error_of([&] { root.required<bool>("d"); }), "b.yaml:4:4: d = 'on' is not a boolean; expected true or false");
}

TEST(YamlReader, UnknownKeyNamesPositionAndAlternatives) {
  const YamlDocument doc = load_yaml_text("parallelism:\n  tp: 2\n  shcedule: 1f1b\n", "run.yaml");
  YamlMap root(doc.root, doc.file, "");
  YamlMap parallelism = root.map("parallelism");
  parallelism.get<int>("tp", 1);
  parallelism.get<std::string>("schedule", "1f1b");
  // `shcedule` is at line 3, column 3.
  EXPECT_EQ(error_of([&] { parallelism.finish(); }),
            "run.yaml:3:3: unknown key 'shcedule' in parallelism; expected one of: schedule, tp");
}

TEST(YamlReader, WrongTypeAndBadUnit) {
  const YamlDocument doc = load_yaml_text("tp: eight\nbw: 80 GiB\nlist: [1, 2]\n", "x.yaml");
  YamlMap root(doc.root, doc.file, "");
  EXPECT_EQ(error_of([&] { root.required<int>("tp"); }), "x.yaml:1:5: tp = 'eight' is not an integer");
  const std::string unit = error_of([&] { root.required<BytesPerSecond>("bw"); });
  EXPECT_EQ(unit.rfind("x.yaml:2:5: bw: '80 GiB' has unit 'GiB'", 0), 0u) << unit;
  EXPECT_EQ(error_of([&] { root.required<int>("list"); }), "x.yaml:3:7: list is a list; expected an integer");
  // One sign at most; digits past the range are out of range, not a non-number.
  const YamlDocument signs = load_yaml_text("a: +-8\nb: +-8.5\nc: +8\nd: -99999999999999999999\n", "s.yaml");
  YamlMap numbers(signs.root, signs.file, "");
  EXPECT_EQ(error_of([&] { numbers.required<int64_t>("a"); }), "s.yaml:1:4: a = '+-8' is not an integer");
  EXPECT_EQ(error_of([&] { numbers.required<double>("b"); }), "s.yaml:2:4: b = '+-8.5' is not a number");
  EXPECT_EQ(numbers.required<int>("c"), 8);
  EXPECT_EQ(error_of([&] { numbers.required<int64_t>("d"); }), "s.yaml:4:4: d = -99999999999999999999 is out of range");
}

TEST(YamlReader, ChoiceListsAlternatives) {
  const YamlDocument doc = load_yaml_text("schedule: interleave\n", "s.yaml");
  YamlMap root(doc.root, doc.file, "");
  EXPECT_EQ(error_of([&] { root.choice("schedule", {"gpipe", "1f1b"}); }),
            "s.yaml:1:11: schedule = 'interleave' is unknown; expected one of: gpipe, 1f1b");
}

TEST(YamlReader, SyntaxErrorAndEmptyFile) {
  EXPECT_EQ(error_of([] { load_yaml_text("a: [1, 2\n", "bad.yaml"); }).rfind("bad.yaml:", 0), 0u);
  EXPECT_NE(error_of([] { load_yaml_text("a: [1, 2\n", "bad.yaml"); }).find("YAML syntax error"),
            std::string::npos);
  EXPECT_EQ(error_of([] { load_yaml_text("", "empty.yaml"); }),
            "empty.yaml:1:1: the file is empty; expected a YAML mapping");
  // Lists nested past the parser's depth guard say so (the parser's own message is "bad file").
  const std::string deep = "a: " + std::string(600, '[') + std::string(600, ']') + "\n";
  EXPECT_EQ(error_of([&] { load_yaml_text(deep, "deep.yaml"); }),
            "deep.yaml:1:1204: YAML syntax error: lists and mappings nest deeper than the 500 "
            "levels the parser reads; a scenario nests a few");
  EXPECT_EQ(error_of([] { load_yaml_file("/nonexistent/x.yaml"); }),
            "/nonexistent/x.yaml: cannot open the file (missing or unreadable)");
  EXPECT_EQ(error_of([] { load_yaml_file("/"); }), "/: is a directory; expected a YAML file");
  // A device that never ends is read only so far.
  EXPECT_EQ(error_of([] { load_yaml_file("/dev/zero"); }),
            "/dev/zero: is larger than 64 MiB; a scenario, catalog or profile file is at most that");
  // A read that fails part-way is an error, not the end of the file.
  EXPECT_EQ(error_of([] { load_yaml_file("/proc/self/mem"); }),
            "/proc/self/mem: cannot read the file (an I/O error part-way)");
}

TEST(YamlReader, ACarriageReturnAloneBreaksALine) {
  // YAML breaks lines at a carriage return, a line feed or both (old Mac, Unix, Windows text).
  const YamlDocument doc = load_yaml_text("a: 1\rb: 2\r\nc: 3\r", "cr.yaml");
  YamlMap root(doc.root, doc.file, "");
  EXPECT_EQ(root.required<int>("a"), 1);
  EXPECT_EQ(root.required<int>("b"), 2);
  EXPECT_EQ(root.required<int>("c"), 3);
  const YamlDocument bad = load_yaml_text("a: 1\rb: x\r", "cr.yaml");
  YamlMap map(bad.root, bad.file, "");
  EXPECT_EQ(error_of([&] { map.required<int>("b"); }), "cr.yaml:2:4: b = 'x' is not an integer");
}

TEST(YamlReader, RefusesWhatTheParserLetsThrough) {
  // A key given twice (the parser keeps the first), a quoted string without its closing quote
  // (it would run to the end of the file, taking the keys after it), a second document.
  EXPECT_EQ(error_of([] { load_yaml_text("p:\n  pp: 2\n  pp: 4\n", "d.yaml"); }),
            "d.yaml:3:3: key 'pp' is given twice in this mapping (first on line 2); give it once");
  EXPECT_EQ(error_of([] { load_yaml_text("a: [{x: 1, x: 2}]\n", "d.yaml"); }),
            "d.yaml:1:12: key 'x' is given twice in this mapping (first on line 1); give it once");
  EXPECT_EQ(error_of([] { load_yaml_text("source: \"my paper\ntied: true\n", "q.yaml"); }),
            "q.yaml:1:9: YAML syntax error: this quoted string has no closing quote");
  EXPECT_EQ(error_of([] { load_yaml_text("a: 1\n---\nb: 2\n", "two.yaml"); }),
            "two.yaml:2:1: a second YAML document ('---'): a file holds one document");
  EXPECT_EQ(error_of([] { load_yaml_text("--- {a: 1}\n--- {b: 2}\n", "two.yaml"); }),
            "two.yaml:2:1: a second YAML document ('---'): a file holds one document");
  // Markers around one document are fine, and malformed text that yaml-cpp's LoadAll loops on
  // is read once.
  EXPECT_EQ(load_yaml_text("%YAML 1.2\n---\n# c\na: 1\n...\n---\n", "one.yaml").root["a"].Scalar(), "1");
  EXPECT_NO_THROW(error_of([] { load_yaml_text(", &\tgi", "loop.yaml"); }));
  EXPECT_EQ(error_of([] { load_yaml_text("a: &n \"abc\nb: 1\n", "q.yaml"); }),
            "q.yaml:1:4: YAML syntax error: this quoted string has no closing quote");
  EXPECT_EQ(error_of([] { load_yaml_text("\xEF\xBB\xBF" "a: 'x'\nb: \"y\n", "bom.yaml"); }),
            "bom.yaml:2:4: YAML syntax error: this quoted string has no closing quote");
  // Bytes that are not UTF-8, cited where they are, in text and in files.
  EXPECT_EQ(
      error_of([] { load_yaml_text("a: 1\nname: \xFF\xFE\n", "u.yaml"); }),
      "u.yaml:2:7: byte 0xFF starts no UTF-8 character; YAML text is UTF-8, UTF-16 or UTF-32");
  EXPECT_EQ(
      error_of([] { load_yaml_text("\xC3(: 1\n", "u.yaml"); }),
      "u.yaml:1:1: byte 0xC3 starts no UTF-8 character; YAML text is UTF-8, UTF-16 or UTF-32");
  // Lines break at a carriage return alone too.
  EXPECT_EQ(
      error_of([] { load_yaml_text("a: 1\rb: 2\r\nname: x\xFF\n", "u.yaml"); }),
      "u.yaml:3:8: byte 0xFF starts no UTF-8 character; YAML text is UTF-8, UTF-16 or UTF-32");
  // UTF-16, which YAML tells from its first bytes, with a byte-order mark or without, is read.
  using namespace std::string_literals;
  EXPECT_EQ(load_yaml_text("\xFF\xFE"
                           "a\0:\0 \0"
                           "1\0\n\0"s,
                           "u16.yaml")
                .root["a"]
                .Scalar(),
            "1");
  EXPECT_EQ(load_yaml_text("\0a\0:\0 \0"
                           "1\0\n"s,
                           "u16.yaml")
                .root["a"]
                .Scalar(),
            "1");
  // An alias of its own list, and aliases of aliases, are walked once.
  EXPECT_EQ(load_yaml_text("x: &a [*a]\n", "cycle.yaml").root["x"].size(), 1u);
  std::string laughs = "l0: &l0 [1, 2]\n";
  for (int level = 1; level < 30; ++level) {
    laughs += fmt::format("l{0}: &l{0} [{1}, {1}, {1}, {1}, {1}, {1}, {1}, {1}]\n", level, fmt::format("*l{}", level - 1));
  }
  EXPECT_EQ(load_yaml_text(laughs, "laughs.yaml").root.size(), 30u);
  // Escaped and doubled quotes close where they should.
  const YamlDocument doc = load_yaml_text("a: \"x \\\" y\"\nb: 'it''s'\n", "ok.yaml");
  EXPECT_EQ(doc.root["a"].Scalar(), "x \" y");
  EXPECT_EQ(doc.root["b"].Scalar(), "it's");
}

TEST(InputError, IsOneLineOfPrintableText) {
  // Values and keys are echoed as given: their control characters are escaped, and a value of
  // pages is cut short.
  EXPECT_STREQ(InputError(SourceLocation{"f.yaml", 1, 2}, "x = 'a\nb\x1b[31m'").what(), "f.yaml:1:2: x = 'a\\nb\\x1b[31m'");
  // Bytes that start no UTF-8 character are escaped too; characters are kept.
  EXPECT_STREQ(InputError(SourceLocation{"f.yaml"}, "x = '\xC3\xA9\xFF'").what(),
               "f.yaml: x = '\xC3\xA9\\xff'");
  const std::string long_message = InputError(SourceLocation{"f.yaml"}, std::string(100000, 'v')).what();
  EXPECT_LT(long_message.size(), 2100u);
  EXPECT_TRUE(long_message.ends_with(" [cut]"));
  // Cut between characters, not inside one: 'é' is two bytes.
  std::string accents;
  for (int i = 0; i < 3000; ++i) accents += "\xC3\xA9";
  const std::string cut = InputError(SourceLocation{"f.yaml"}, "x" + accents).what();
  EXPECT_TRUE(cut.ends_with("\xC3\xA9 [cut]")) << cut.substr(cut.size() - 12);
}

TEST(InputError, EchoedValuesAreCutShort) {
  EXPECT_EQ(echoed("short"), "short");
  EXPECT_EQ(echoed(std::string(80, 'v')), std::string(80, 'v'));
  EXPECT_EQ(echoed(std::string(81, 'v')), std::string(77, 'v') + "...");
  // Not inside a UTF-8 character: after "xx" each two-byte 'é' starts at an even byte, so the
  // 78th byte (index 77) is the second of one.
  std::string accents = "xx";
  for (int i = 0; i < 100; ++i) accents += "\xC3\xA9";
  EXPECT_EQ(echoed(accents), accents.substr(0, 76) + "...");
  const YamlDocument doc = load_yaml_text("a: " + std::string(5000, '9') + "x\n", "e.yaml");
  YamlMap root(doc.root, doc.file, "");
  EXPECT_EQ(error_of([&] { root.required<int>("a"); }),
            "e.yaml:1:4: a = '" + std::string(77, '9') + "...' is not an integer");
}

TEST(YamlReader, MissingRequiredKeyPointsAtTheMapping) {
  const YamlDocument doc = load_yaml_text("model:\n  layers: 2\n", "m.yaml");
  YamlMap root(doc.root, doc.file, "");
  YamlMap model = root.map("model");
  EXPECT_EQ(error_of([&] { model.required<int>("hidden"); }), "m.yaml:2:3: model.hidden is required");
}

}  // namespace
}  // namespace paceline
