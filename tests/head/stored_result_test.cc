// The results family's values (head/stored_result.h): msgpack since schema 3,
// JSON text before; every reader sees the same JSON text and DOM for either,
// and refuses damage with a sentence naming what it is.
#include "head/stored_result.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/protocol/codec.h"
#include "common/protocol/result_view.h"
#include "head/last_result.h"
#include "head/trial.h"

namespace ztune::head {
namespace {

const Json kResult = {{"training_iteration", 7},
                      {"loss", 0.125},
                      {"eval", {{"acc", 0.5}, {"tags", {"a", "caf\u00e9"}}}},
                      {"done", true},
                      {"trial_id", "e0001_00003"},
                      {"big", 18446744073709551615ull},
                      {"neg", -3},
                      {"none", nullptr}};

TEST(StoredResultTest, BothSchemasReadAsTheSameTextAndDom) {
  const std::string json_text = kResult.dump();
  const std::string msgpack = StoredResultValue(kResult);
  EXPECT_FALSE(IsStoredAsJsonText(msgpack));
  EXPECT_TRUE(IsStoredAsJsonText(json_text));
  for (const std::string& value : {json_text, msgpack}) {
    EXPECT_EQ(StoredResultText(value).value(), json_text);
    EXPECT_EQ(ParseStoredResult(value).value(), kResult);
    std::string out = "[";
    AppendStoredResultText(value, out);
    EXPECT_EQ(out, "[" + json_text);
  }
}

TEST(StoredResultTest, AValueFromADomReadsBackAsThatDom) {
  // An integral float stays a float (msgpack-c would pack 3.0 as 3).
  const Json floats = {{"training_iteration", 3}, {"loss", 3.0}, {"small", 0.1}, {"f32", 0.5}};
  const std::string value = StoredResultValue(floats);
  EXPECT_EQ(StoredResultText(value).value(), floats.dump());
  EXPECT_TRUE(ParseStoredResult(value).value()["loss"].is_number_float());
  EXPECT_EQ(ParseStoredResult(value).value(), floats);
}

TEST(StoredResultTest, ANonFiniteNumberReadsAsNullAsSchemaTwoStoredIt) {
  // A worker may send NaN and infinities; schema 2's text held null, and
  // the msgpack keeps the number, read back as null by every reader.
  Json with_nan = {{"training_iteration", 1},
                   {"loss", std::numeric_limits<double>::quiet_NaN()},
                   {"inf", -std::numeric_limits<double>::infinity()}};
  const std::string msgpack = protocol::JsonToMsgpack(with_nan);
  EXPECT_TRUE(std::isnan(protocol::ResultView(msgpack).Find("loss")->f)) << "kept as sent";
  EXPECT_EQ(StoredResultText(msgpack).value(),
            R"({"inf":null,"loss":null,"training_iteration":1})");
  const Json parsed = ParseStoredResult(msgpack).value();
  EXPECT_TRUE(parsed["loss"].is_null());
  EXPECT_TRUE(parsed["inf"].is_null());
}

TEST(StoredResultTest, DamageIsCorruptionThatCompletesASentence) {
  struct Case {
    std::string value;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"", "is neither JSON text nor a msgpack map"},
      {"\x82\xa1", "is neither JSON text nor a msgpack map"},                           // cut short
      {std::string("\x81\xa1x\x01\x02", 5), "is neither JSON text nor a msgpack map"},  // trailing
      {"\x91\x01", "is neither JSON text nor a msgpack map"},                           // an array
      {"{\"a\":", "is not JSON: "},
      {"{\"a\":1} x", "is not JSON: "},
  };
  for (const Case& c : cases) {
    Result<Json> r = ParseStoredResult(c.value);
    ASSERT_FALSE(r.ok()) << c.says;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    EXPECT_EQ(r.status().message().rfind(c.says, 0), 0u) << r.status().message();
  }
  EXPECT_FALSE(StoredResultText("\x82\xa1").ok());
}

TEST(StoredResultTest, ALastResultKeptAsMsgpackReadsAndIsRecordedAsTheDom) {
  const std::string stored =
      protocol::ResultView(protocol::JsonToMsgpack(kResult)).StampedMsgpack("e0001_00003", false);
  Json expected = kResult;
  expected["done"] = false;

  LastResult kept;
  kept.SetStored(stored, "eval/acc", 0.5);
  EXPECT_FALSE(kept.is_null());
  EXPECT_EQ(kept.Metric("eval/acc"), 0.5);
  EXPECT_EQ(kept.Metric("loss"), 0.125) << "another key is read from the value";
  EXPECT_EQ(kept.Copy(), expected);
  EXPECT_EQ(kept.Get(), expected);
  std::string text;
  kept.AppendText(text);
  EXPECT_EQ(text, expected.dump());

  // A trial record embeds it as JSON text, as for a result held as a DOM.
  Trial a;
  a.trial_id = TrialId("e0001_00003");
  a.experiment_id = "e0001";
  Trial b = a;
  a.last_result.SetStored(stored);
  b.last_result = expected;
  EXPECT_EQ(a.ToRecordText(), b.ToRecordText());
  EXPECT_EQ(Json::parse(a.ToRecordText())["last_result"], expected);
}

}  // namespace
}  // namespace ztune::head
