// Reading a stored last result without its DOM (head/last_result_scan.h):
// the scan's checks and metric against what the DOM (FindFlatKey,
// CheckStoredLastResult) says of the same text.
#include "head/last_result_scan.h"

#include <cmath>
#include <optional>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "common/flat_key.h"
#include "common/json.h"
#include "head/trial.h"

namespace ztune::head {
namespace {

TEST(ScanLastResultTextTest, ReadsTheMetricAsFindFlatKeyDoes) {
  const std::string r =
      R"({"loss":0.25,"acc":3,"eval/acc":0.5,"eval":{"acc":0.75,"f1":{"x":2}},"s":"1",)"
      R"("n":null,"neg":-7,"arr":[{"acc":1}],"u":18446744073709551615})";
  auto metric = [&](const std::string& key) { return ScanLastResultText(r, key).metric; };
  EXPECT_EQ(metric("loss"), 0.25);
  EXPECT_EQ(metric("acc"), 3.0);
  EXPECT_EQ(metric("eval/acc"), 0.5) << "the top-level key spelt so comes first";
  EXPECT_EQ(metric("eval/f1/x"), 2.0);
  EXPECT_EQ(metric("neg"), -7.0);
  EXPECT_EQ(metric("u"), 18446744073709551615.0);
  for (const char* none :
       {"s", "n", "eval", "eval/f1", "arr/acc", "arr", "missing", "eval/missing", "loss/x", ""}) {
    EXPECT_EQ(metric(none), std::nullopt) << none;
  }
  EXPECT_TRUE(ScanLastResultText(r, "loss").status.ok());
  EXPECT_FALSE(ScanLastResultText(r, "loss").needs_dom);
}

TEST(ScanLastResultTextTest, RefusesWhatCheckStoredLastResultRefuses) {
  struct Case {
    const char* text;
    const char* message;  // "" = OK
  };
  for (const Case& c : std::initializer_list<Case>{
           {R"({"done":true,"should_checkpoint":false})", ""},
           {R"({"done":1})", "trial record: last_result.done is not a boolean"},
           {R"({"done":"yes"})", "trial record: last_result.done is not a boolean"},
           {R"({"should_checkpoint":{}})",
            "trial record: last_result.should_checkpoint is not a boolean"},
           {R"({"x":{"done":1}})", ""},
           {R"([1,2])", "trial record: last_result is not an object"},
           {R"(7)", "trial record: last_result is not an object"},
           {R"({"a":1)", "trial record: last_result is not JSON"},
           {"{\"a\":\"\xff\"}", "trial record: last_result is not JSON"},
           {R"({"a":1} {})", "trial record: last_result is not JSON"},
       }) {
    SCOPED_TRACE(c.text);
    const LastResultScan scan = ScanLastResultText(c.text, "a");
    EXPECT_FALSE(scan.needs_dom);
    EXPECT_EQ(scan.status.message(), c.message);
    EXPECT_EQ(scan.status.ok(), std::string(c.message).empty());
    // The DOM's verdict on the same text.
    const Json j = Json::parse(c.text, nullptr, /*allow_exceptions=*/false);
    EXPECT_EQ(!j.is_discarded() && CheckStoredLastResult(j, "trial record: last_result").ok(),
              scan.status.ok());
  }
}

TEST(ScanLastResultTextTest, LeavesRepeatedKeysItReadsAndDeepNestingToTheDom) {
  EXPECT_TRUE(ScanLastResultText(R"({"done":false,"done":true})", "").needs_dom);
  EXPECT_TRUE(ScanLastResultText(R"({"loss":1,"loss":2})", "loss").needs_dom);
  EXPECT_TRUE(ScanLastResultText(R"({"e":{"a":1},"e":{"a":2}})", "e/a").needs_dom);
  EXPECT_TRUE(ScanLastResultText(R"({"e":{"a":1,"a":2}})", "e/a").needs_dom);
  const LastResultScan other = ScanLastResultText(R"({"x":1,"x":2,"e":{"b":1,"b":2},"a":3})", "a");
  EXPECT_FALSE(other.needs_dom) << "keys the scan does not read may repeat";
  EXPECT_EQ(other.metric, 3.0);
  for (const char* number : {"1e999", "-1e400", "1e99999", "1.5e+301"}) {
    EXPECT_TRUE(ScanLastResultText(std::string("{\"a\":") + number + "}", "a").needs_dom)
        << number << ": nlohmann refuses what overflows a double";
  }
  EXPECT_TRUE(ScanLastResultText(R"({"d\u006fne":1})", "").needs_dom) << "an escaped key";
  std::string deep = "{\"a\":";
  for (size_t i = 0; i < kMaxScanDepth; ++i) deep += "[";
  for (size_t i = 0; i < kMaxScanDepth; ++i) deep += "]";
  deep += "}";
  EXPECT_TRUE(ScanLastResultText(deep, "a").needs_dom);
}

// Random results, random keys: the scan and the DOM agree on every metric.
TEST(ScanLastResultTextTest, AgreesWithTheDomOnRandomResults) {
  std::mt19937 rng(20261204);
  const std::vector<std::string> names = {"a", "b", "a/b", "loss", "done", "b/a"};
  std::function<Json(int)> value = [&](int depth) -> Json {
    switch (rng() % (depth < 3 ? 8 : 5)) {
      case 0: return Json(static_cast<double>(rng() % 1000) / 8);
      case 1: return Json(static_cast<int64_t>(rng() % 100) - 50);
      case 2: return Json("s" + std::to_string(rng() % 10));
      case 3: return Json(nullptr);
      case 4: return Json(rng() % 2 == 0);
      case 5:
      case 6: {
        Json o = Json::object();
        for (int i = static_cast<int>(rng() % 4); i > 0; --i) {
          o[names[rng() % names.size()]] = value(depth + 1);
        }
        return o;
      }
      default: {
        Json a = Json::array();
        for (int i = static_cast<int>(rng() % 3); i > 0; --i) a.push_back(value(depth + 1));
        return a;
      }
    }
  };
  int compared = 0;
  for (int n = 0; n < 3000; ++n) {
    Json result = Json::object();
    for (int i = static_cast<int>(rng() % 5); i > 0; --i) {
      const std::string& k = names[rng() % names.size()];
      result[k] = k == "done" ? Json(rng() % 4 != 0) : value(1);
    }
    const std::string text = result.dump();
    for (const std::string key : {"a", "b", "a/b", "b/a", "loss", "a/b/a", "x"}) {
      SCOPED_TRACE(text + " key " + key);
      const LastResultScan scan = ScanLastResultText(text, key);
      ASSERT_FALSE(scan.needs_dom);
      ASSERT_EQ(scan.status.ok(), CheckStoredLastResult(result, "r").ok());
      if (!scan.status.ok()) continue;
      const Json* v = FindFlatKey(result, key);
      std::optional<double> expected;
      if (v != nullptr && v->is_number() && std::isfinite(v->get<double>())) {
        expected = v->get<double>();
      }
      EXPECT_EQ(scan.metric, expected);
      ++compared;
    }
  }
  EXPECT_GT(compared, 10000);
}

// Valid results with random bytes changed, cut or inserted: whatever the scan
// takes, nlohmann parses (LastResult::Get CHECKs that it does), and on what
// both read, they agree.
TEST(ScanLastResultTextTest, TakesNothingNlohmannRefuses) {
  std::mt19937 rng(7);
  const std::vector<std::string> seeds = {
      R"({"loss":0.25,"done":false,"eval":{"acc":[1,2.5e-3,-0]},"s":"caf\u00e9 \"q\" \ud83d\ude00 \u00e9\n"})",
      "{\"a\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\",\"b\":[true,null,{}],\"c\":1E+2}",
      R"({"should_checkpoint":true,"x":{"y":{"z":-12.5}},"t":[[],[[]]],"n":0})"};
  const std::string alphabet =
      "{}[]\":,-+.eE0123456789truefalsnul\\/u \x01\x7f\xc3\xa9\xed\xa0\xf4\x90";
  int taken = 0;
  for (int n = 0; n < 60000; ++n) {
    std::string text = seeds[rng() % seeds.size()];
    for (int edits = 1 + static_cast<int>(rng() % 3); edits > 0; --edits) {
      const size_t at = rng() % (text.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          if (at < text.size()) text[at] = c;
          break;
        case 1: text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        default:
          if (at < text.size()) text.erase(at, 1);
      }
    }
    const LastResultScan scan = ScanLastResultText(text, "eval/acc");
    const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (scan.needs_dom) continue;
    if (scan.status.ok()) {
      ASSERT_FALSE(j.is_discarded()) << "the scan took what nlohmann refuses: " << text;
      ++taken;
    }
    if (!j.is_discarded()) {
      EXPECT_EQ(scan.status.ok(), CheckStoredLastResult(j, "r").ok()) << text;
      if (scan.status.ok()) {
        const Json* v = FindFlatKey(j, "eval/acc");
        std::optional<double> expected;
        if (v != nullptr && v->is_number()) expected = v->get<double>();
        EXPECT_EQ(scan.metric, expected) << text;
      }
    }
  }
  EXPECT_GT(taken, 1000);
}

}  // namespace
}  // namespace ztune::head
