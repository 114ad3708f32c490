// The worker's --trainables file (docs/process-protocol.md "Which programs a
// worker runs"): what a valid file gives, and every refusal with a message
// naming the file, the trainable and the key.
#include "worker/process_trainable_config.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "actor_harness.h"

namespace ztune::worker {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSource = "/etc/ztune/trainables.json";
constexpr const char* kBase = "/etc/ztune";

Result<std::vector<ProcessTrainableSpec>> Parse(const std::string& text) {
  return ParseProcessTrainables(text, kBase, kSource);
}

std::map<std::string, ProcessTrainableSpec> ByName(const std::vector<ProcessTrainableSpec>& v) {
  std::map<std::string, ProcessTrainableSpec> m;
  for (const auto& s : v) m[s.name] = s;
  return m;
}

// Parsing `text` fails with InvalidArgument whose message is exactly `message`.
void ExpectRefused(const std::string& text, const std::string& message) {
  auto r = Parse(text);
  ASSERT_FALSE(r.ok()) << text;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
  EXPECT_EQ(r.status().message(), message) << text;
}

TEST(ProcessTrainableConfigTest, ParsesAValidFile) {
  auto r = Parse(R"({
    "mnist": {
      "argv": ["/usr/bin/python3", "/srv/tune/mnist.py", "--flag", ""],
      "env": {"PYTHONPATH": "/srv/tune/lib", "EMPTY": ""},
      "cwd": "sub/../work",
      "stop_grace_s": 2.5
    },
    "plain": {"argv": ["prog"]},
    "null-cwd": {"argv": ["prog"], "cwd": null, "stop_grace_s": 0},
    "absolute": {"argv": ["prog"], "cwd": "/var/lib/x/../tune", "stop_grace_s": 3600},
    "café ünïcode": {"argv": ["prog"], "env": {}}
  })");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto specs = ByName(*r);
  ASSERT_EQ(specs.size(), 5u);

  const ProcessTrainableSpec& m = specs.at("mnist");
  EXPECT_EQ(m.name, "mnist");
  EXPECT_EQ(m.argv,
            (std::vector<std::string>{"/usr/bin/python3", "/srv/tune/mnist.py", "--flag", ""}));
  EXPECT_EQ(m.env,
            (std::map<std::string, std::string>{{"PYTHONPATH", "/srv/tune/lib"}, {"EMPTY", ""}}));
  // Relative: against the directory of the file, normalised.
  EXPECT_EQ(m.cwd, "/etc/ztune/work");
  EXPECT_EQ(m.stop_grace_ms, 2500);

  // Defaults: no env, the trial's directory (empty), 5 s.
  const ProcessTrainableSpec& p = specs.at("plain");
  EXPECT_EQ(p.argv, std::vector<std::string>{"prog"});
  EXPECT_TRUE(p.env.empty());
  EXPECT_EQ(p.cwd, "");
  EXPECT_EQ(p.stop_grace_ms, 5000);

  EXPECT_EQ(specs.at("null-cwd").cwd, "");
  EXPECT_EQ(specs.at("null-cwd").stop_grace_ms, 0);
  EXPECT_EQ(specs.at("absolute").cwd, "/var/lib/tune");
  EXPECT_EQ(specs.at("absolute").stop_grace_ms, 3'600'000);
  EXPECT_TRUE(specs.at("café ünïcode").env.empty());

  // An empty object: no trainables.
  auto empty = Parse("{}");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

// A relative program path is found next to the trainables file (as a
// relative cwd is), not in the trial's directory the child starts in; a
// bare name is still looked up in PATH; arguments stay as written.
TEST(ProcessTrainableConfigTest, RelativeProgramPathsAreRelativeToTheFile) {
  auto r = Parse(R"({"dot": {"argv": ["./train.sh", "./data"]},
                     "sub": {"argv": ["bin/../run", "x"]},
                     "bare": {"argv": ["python3", "t.py"]}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto specs = ByName(*r);
  EXPECT_EQ(specs.at("dot").argv, (std::vector<std::string>{"/etc/ztune/train.sh", "./data"}));
  EXPECT_EQ(specs.at("sub").argv, (std::vector<std::string>{"/etc/ztune/run", "x"}));
  EXPECT_EQ(specs.at("bare").argv, (std::vector<std::string>{"python3", "t.py"}));
}

TEST(ProcessTrainableConfigTest, GraceIsRoundedToMilliseconds) {
  auto r = Parse(R"({"a": {"argv": ["p"], "stop_grace_s": 0.0004},
                     "b": {"argv": ["p"], "stop_grace_s": 0.0006},
                     "c": {"argv": ["p"], "stop_grace_s": 7}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto specs = ByName(*r);
  EXPECT_EQ(specs.at("a").stop_grace_ms, 0);
  EXPECT_EQ(specs.at("b").stop_grace_ms, 1);
  EXPECT_EQ(specs.at("c").stop_grace_ms, 7000);
}

TEST(ProcessTrainableConfigTest, RefusesWhatIsNotAnObjectOfObjects) {
  const std::string not_object =
      std::string(kSource) + ": must be a JSON object of trainable name -> {\"argv\": [...], ...}";
  ExpectRefused("[]", not_object);
  ExpectRefused(R"(["a"])", not_object);
  ExpectRefused("null", not_object);
  ExpectRefused("3", not_object);
  const std::string where = std::string(kSource) + ": trainable 'a'";
  ExpectRefused(R"({"a": 1})", where + ": must be an object");
  ExpectRefused(R"({"a": ["/bin/true"]})", where + ": must be an object");
  ExpectRefused(R"({"a": null})", where + ": must be an object");
}

TEST(ProcessTrainableConfigTest, NamesStartingWithAnAtAreReserved) {
  // "@python" is submitted code (--allow-submitted-code); a configured
  // program must not take its name.
  auto r = Parse(R"({"@python": {"argv": ["/bin/true"]}})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("reserved"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("--allow-submitted-code"), std::string::npos);
}

TEST(ProcessTrainableConfigTest, RefusesUnknownKeysNamingTheKnownOnes) {
  ExpectRefused(R"({"a": {"argv": ["p"], "command": "rm -rf /"}})",
                std::string(kSource) +
                    ": trainable 'a': unknown key 'command' (known: argv, env, cwd, stop_grace_s, "
                    "export_formats)");
  // Keys are case-sensitive.
  ExpectRefused(R"({"a": {"ARGV": ["p"]}})", std::string(kSource) +
                                                 ": trainable 'a': unknown key 'ARGV' (known: "
                                                 "argv, env, cwd, stop_grace_s, export_formats)");
}

// A copied-and-edited entry must not silently replace the one above it.
TEST(ProcessTrainableConfigTest, RefusesATrainableOrKeyNamedTwice) {
  ExpectRefused(R"({"a": {"argv": ["p"]}, "a": {"argv": ["q"]}})",
                std::string(kSource) + ": key 'a' appears twice in one object");
  ExpectRefused(R"({"a": {"argv": ["p"], "argv": ["q"]}})",
                std::string(kSource) + ": key 'argv' appears twice in one object");
}

TEST(ProcessTrainableConfigTest, RefusesBadArgv) {
  const std::string at = std::string(kSource) + ": trainable 'a': ";
  ExpectRefused(R"({"a": {}})", at + "argv is required");
  ExpectRefused(R"({"a": {"env": {"X": "1"}}})", at + "argv is required");
  ExpectRefused(R"({"a": {"argv": []}})", at + "argv must be a non-empty array of strings");
  ExpectRefused(R"({"a": {"argv": "/bin/true"}})",
                at + "argv must be a non-empty array of strings");
  ExpectRefused(R"({"a": {"argv": null}})", at + "argv must be a non-empty array of strings");
  ExpectRefused(R"({"a": {"argv": ["p", 1]}})", at + "argv must hold only strings");
  ExpectRefused(R"({"a": {"argv": ["p", null]}})", at + "argv must hold only strings");
  ExpectRefused(R"({"a": {"argv": [["p"]]}})", at + "argv must hold only strings");
  ExpectRefused(R"({"a": {"argv": ["", "x"]}})", at + "argv[0] is empty");
}

TEST(ProcessTrainableConfigTest, RefusesBadEnv) {
  const std::string at = std::string(kSource) + ": trainable 'a': ";
  ExpectRefused(R"({"a": {"argv": ["p"], "env": {"N": 1}}})", at + "env.N must be a string");
  ExpectRefused(R"({"a": {"argv": ["p"], "env": {"N": null}}})", at + "env.N must be a string");
  ExpectRefused(R"({"a": {"argv": ["p"], "env": {"N": ["x"]}}})", at + "env.N must be a string");
  ExpectRefused(R"({"a": {"argv": ["p"], "env": {"A=B": "x"}}})",
                at + "env: 'A=B' is not a variable name");
  ExpectRefused(R"({"a": {"argv": ["p"], "env": {"": "x"}}})",
                at + "env: '' is not a variable name");
  ExpectRefused(R"({"a": {"argv": ["p"], "env": ["A=1"]}})",
                at + "env must be an object of strings");
  ExpectRefused(R"({"a": {"argv": ["p"], "env": "A=1"}})", at + "env must be an object of strings");
}

// Declared export formats reach the spec; undeclared stays "any".
TEST(ProcessTrainableConfigTest, ParsesDeclaredExportFormats) {
  auto r = Parse(R"({"a": {"argv": ["p"], "export_formats": ["onnx", "pt"]},
                     "b": {"argv": ["p"], "export_formats": []}, "c": {"argv": ["p"]}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto specs = ByName(*r);
  EXPECT_EQ(specs.at("a").export_formats, (std::vector<std::string>{"onnx", "pt"}));
  EXPECT_EQ(specs.at("b").export_formats, std::vector<std::string>{});
  EXPECT_FALSE(specs.at("c").export_formats.has_value());
  const std::string message =
      std::string(kSource) +
      ": trainable 'a': export_formats must hold format names of 1 to 128 bytes of printable UTF-8";
  for (const char* bad : {R"([""])", R"([1])", R"([null])", R"(["a\u0007"])"}) {
    ExpectRefused(std::string(R"({"a": {"argv": ["p"], "export_formats": )") + bad + "}}", message);
  }
  ExpectRefused(
      R"({"a": {"argv": ["p"], "export_formats": "onnx"}})",
      std::string(kSource) + ": trainable 'a': export_formats must be an array of strings");
}

TEST(ProcessTrainableConfigTest, RefusesBadCwd) {
  const std::string at = std::string(kSource) + ": trainable 'a': ";
  ExpectRefused(R"({"a": {"argv": ["p"], "cwd": ""}})",
                at + "cwd must be a non-empty string or null");
  ExpectRefused(R"({"a": {"argv": ["p"], "cwd": 3}})",
                at + "cwd must be a non-empty string or null");
  ExpectRefused(R"({"a": {"argv": ["p"], "cwd": ["/tmp"]}})",
                at + "cwd must be a non-empty string or null");
}

TEST(ProcessTrainableConfigTest, RefusesAGraceOutsideZeroTo3600Seconds) {
  const std::string message =
      std::string(kSource) +
      ": trainable 'a': stop_grace_s must be a number of seconds in [0, 3600]";
  for (const char* grace :
       {"-1", "-0.001", "3600.001", "1e9", "\"5\"", "true", "null", "[5]", "{}"}) {
    ExpectRefused(std::string(R"({"a": {"argv": ["p"], "stop_grace_s": )") + grace + "}}", message);
  }
  // Beyond double: refused either by the parser or by the range check.
  auto huge = Parse(R"({"a": {"argv": ["p"], "stop_grace_s": 1e400}})");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(huge.status().message().rfind(kSource, 0), 0u) << huge.status().message();
}

TEST(ProcessTrainableConfigTest, RefusesNamesThatAreEmptyTooLongOrNotPrintable) {
  auto refused_name = [](const std::string& name) {
    return std::string(kSource) + ": trainable '" + name +
           "': a name must be 1 to 128 bytes of printable UTF-8";
  };
  ExpectRefused(R"({"": {"argv": ["p"]}})", refused_name(""));
  const std::string longest(128, 'n');
  EXPECT_TRUE(Parse("{\"" + longest + "\": {\"argv\": [\"p\"]}}").ok());
  const std::string too_long(129, 'n');
  ExpectRefused("{\"" + too_long + "\": {\"argv\": [\"p\"]}}", refused_name(too_long));
  ExpectRefused(R"({"a\tb": {"argv": ["p"]}})", refused_name("a\tb"));
  ExpectRefused(R"({"a\nb": {"argv": ["p"]}})", refused_name("a\nb"));
  ExpectRefused(R"({"a\u001bb": {"argv": ["p"]}})", refused_name("a\x1b"
                                                                 "b"));
  ExpectRefused(R"({"a\u007fb": {"argv": ["p"]}})", refused_name("a\x7f"
                                                                 "b"));
  // 128 bytes, not characters: 64 two-byte characters fit, 65 do not.
  std::string two_byte_64, two_byte_65;
  for (int i = 0; i < 64; ++i) two_byte_64 += "\xc3\xa9";
  two_byte_65 = two_byte_64 + "\xc3\xa9";
  EXPECT_TRUE(Parse("{\"" + two_byte_64 + "\": {\"argv\": [\"p\"]}}").ok());
  ExpectRefused("{\"" + two_byte_65 + "\": {\"argv\": [\"p\"]}}", refused_name(two_byte_65));
}

TEST(ProcessTrainableConfigTest, RefusesInvalidJsonNamingTheFile) {
  for (const char* text : {"", "{", R"({"a": {"argv": ["p"]})", R"({"a": {"argv": ["p"],}})",
                           "{\"a\xff\": {\"argv\": [\"p\"]}}"}) {
    auto r = Parse(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(r.status().message().rfind(std::string(kSource) + ": ", 0), 0u)
        << r.status().message();
  }
}

TEST(ProcessTrainableConfigTest, LoadResolvesCwdAgainstTheFilesDirectory) {
  TempDir dir;
  fs::create_directories(dir.path() + "/conf");
  const std::string path = dir.path() + "/conf/trainables.json";
  std::ofstream(path) << R"({"t": {"argv": ["/bin/true"], "cwd": "../data", "stop_grace_s": 1},
                              "u": {"argv": ["/bin/true"], "cwd": "."}})";
  auto r = LoadProcessTrainables(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto specs = ByName(*r);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs.at("t").cwd, dir.path() + "/data");
  EXPECT_EQ(specs.at("t").stop_grace_ms, 1000);
  EXPECT_EQ(fs::path(specs.at("u").cwd).lexically_normal(),
            fs::path(dir.path() + "/conf/").lexically_normal());
  EXPECT_TRUE(fs::path(specs.at("u").cwd).is_absolute());

  // A refusal names the file as given.
  std::ofstream(path, std::ios::trunc) << R"({"t": {"argv": ["/bin/true"], "cmd": 1}})";
  auto bad = LoadProcessTrainables(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind(path + ": trainable 't': unknown key 'cmd'", 0), 0u)
      << bad.status().message();
}

TEST(ProcessTrainableConfigTest, LoadOfAMissingFileIsAnIOErrorNamingIt) {
  TempDir dir;
  const std::string path = dir.path() + "/no-such-file.json";
  auto r = LoadProcessTrainables(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_EQ(r.status().message().rfind("cannot read --trainables file " + path, 0), 0u)
      << r.status().message();
  EXPECT_NE(r.status().message().find(strerror(ENOENT)), std::string::npos) << r.status().message();
}

// A directory opens as an ifstream on Linux and then reads nothing: it must
// be refused as unreadable, not as "invalid JSON ... unexpected end of
// input" (which sends the operator looking for a syntax error).
TEST(ProcessTrainableConfigTest, LoadOfADirectoryIsAnIOErrorNamingIt) {
  TempDir dir;
  auto r = LoadProcessTrainables(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIOError) << r.status().ToString();
  EXPECT_EQ(r.status().message().rfind("cannot read --trainables file " + dir.path(), 0), 0u)
      << r.status().message();
}

}  // namespace
}  // namespace ztune::worker
