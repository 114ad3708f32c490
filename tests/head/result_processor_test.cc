// ResultProcessor: one RESULT batch -> results to store and one decision.
#include "head/result_processor.h"

#include <gtest/gtest.h>

#include "common/protocol/codec.h"
#include "head/stored_result.h"

namespace ztune::head {
namespace {

ExperimentSpec Spec(const char* json) { return ExperimentSpec::Parse(Json::parse(json), 1).value(); }

// The results as the head gets them: through the codec, in its normal form.
std::vector<protocol::ResultRecord> Batch(std::vector<Json> results) {
  protocol::ResultBatch b;
  b.rid = 1;
  b.trial_id = "T";
  b.attempt = 1;
  uint64_t seq = 0;
  for (auto& r : results) b.results.push_back({++seq, protocol::RawResult::FromJson(r)});
  auto decoded = protocol::Decode(protocol::Encode(b));
  EXPECT_TRUE(decoded.ok()) << decoded.status().ToString();
  return std::get<protocol::ResultBatch>(decoded->body).results;
}

// What the runner stores for `r` of trial "T".
Json Stored(const AcceptedResult& r) {
  EXPECT_EQ(r.stored, ResultProcessor::StoredValue(TrialId("T"), r));
  return ParseStoredResult(r.stored).value();
}

Json R(int64_t i, double loss = 1.0) { return Json{{"training_iteration", i}, {"loss", loss}}; }

TEST(ResultProcessorTest, StoresEveryResultAndDecidesOnceAtTheEnd) {
  // A checkpoint trigger mid-batch keeps the results after it (Ray).
  auto spec = Spec(R"({"trainable": "q", "checkpoint": {"frequency": 2}})");
  BatchOutcome o = ResultProcessor::Process(TrialId("T"), 0, 0, spec, Batch({R(1), R(2), R(3)}));
  ASSERT_TRUE(o.error.empty()) << o.error;
  ASSERT_EQ(o.accepted.size(), 3u);
  EXPECT_TRUE(o.checkpoint);
  EXPECT_FALSE(o.stop);
  EXPECT_EQ(Stored(o.accepted[2])["trial_id"], "T");
  EXPECT_EQ(Stored(o.accepted[2])["done"], false);
}

TEST(ResultProcessorTest, AStopIgnoresTheRestOfTheBatch) {
  auto spec = Spec(R"({"trainable": "q", "stop": {"loss": 5}})");
  BatchOutcome o = ResultProcessor::Process(TrialId("T"), 0, 0, spec, Batch({R(1), R(2, 7), R(3)}));
  ASSERT_EQ(o.accepted.size(), 2u);
  EXPECT_TRUE(o.stop);
  EXPECT_EQ(Stored(o.accepted[1])["done"], true);
}

TEST(ResultProcessorTest, ADoneResultNeedsNoCriterionKeyButOthersDo) {
  auto spec = Spec(R"({"trainable": "q", "stop": {"accuracy": 0.9}})");
  Json done = R(1);
  done["done"] = true;
  BatchOutcome o = ResultProcessor::Process(TrialId("T"), 0, 0, spec, Batch({done}));
  EXPECT_TRUE(o.error.empty()) << o.error;
  EXPECT_TRUE(o.stop);
  o = ResultProcessor::Process(TrialId("T"), 0, 0, spec, Batch({R(1)}));
  EXPECT_NE(o.error.find("stopping criterion 'accuracy' not found"), std::string::npos) << o.error;
  EXPECT_TRUE(o.accepted.empty());
}

TEST(ResultProcessorTest, ReplaysAreSkippedAndGapsAreErrors) {
  auto spec = Spec(R"({"trainable": "q"})");
  BatchOutcome o = ResultProcessor::Process(TrialId("T"), 2, 0, spec, Batch({R(1), R(2), R(3)}));
  ASSERT_EQ(o.accepted.size(), 1u);
  EXPECT_EQ(o.accepted[0].iteration, 3);
  o = ResultProcessor::Process(TrialId("T"), 2, 0, spec, Batch({R(3), R(5)}));
  EXPECT_NE(o.error.find("does not follow iteration 3"), std::string::npos) << o.error;
  EXPECT_TRUE(o.accepted.empty()) << "a batch with an invalid result is stored not at all";
  // Resumed from a checkpoint at 10 with 4 results stored: the next is 11.
  o = ResultProcessor::Process(TrialId("T"), 4, 10, spec, Batch({R(11)}));
  EXPECT_TRUE(o.error.empty()) << o.error;
}

TEST(ResultProcessorTest, FlagsMustBeBooleansAndIterationsIntegers) {
  auto spec = Spec(R"({"trainable": "q"})");
  for (Json bad : {Json{{"training_iteration", 1}, {"done", 1}},
                   Json{{"training_iteration", 1}, {"should_checkpoint", "x"}},
                   Json{{"training_iteration", 1.5}}, Json::array(), Json{{"loss", 1}}}) {
    BatchOutcome o = ResultProcessor::Process(TrialId("T"), 0, 0, spec, Batch({bad}));
    EXPECT_FALSE(o.error.empty()) << bad.dump();
    EXPECT_TRUE(o.accepted.empty());
  }
  Json asked = R(1);
  asked["should_checkpoint"] = true;
  EXPECT_TRUE(ResultProcessor::Process(TrialId("T"), 0, 0, spec, Batch({asked})).checkpoint);
}

// Issue 14 (Ray's strict metric checking): a metric the trainable never
// reports fails the trial at its first result, naming the key and what the
// result did report; so does a stopping criterion's key.
TEST(ResultProcessorTest, TheExperimentsMetricMustBeInEveryResult) {
  auto spec = Spec(R"({"trainable": "q", "metric": "acc", "mode": "max"})");
  BatchOutcome o = ResultProcessor::Process(TrialId("T"), 0, 0, spec, Batch({R(1)}));
  EXPECT_EQ(o.error,
            "result of iteration 1 has no 'acc', the experiment's metric (the result reports: "
            "loss, training_iteration)");
  EXPECT_TRUE(o.accepted.empty());
  Json with = R(1);
  with["acc"] = 0.5;
  o = ResultProcessor::Process(TrialId("T"), 0, 0, spec, Batch({with}));
  EXPECT_TRUE(o.error.empty()) << o.error;
  with["acc"] = "high";
  o = ResultProcessor::Process(TrialId("T"), 0, 0, spec, Batch({with}));
  EXPECT_NE(o.error.find("a non-numeric 'acc'"), std::string::npos) << o.error;
  Json done = R(1);  // a final result may carry nothing else (Ray)
  done["done"] = true;
  o = ResultProcessor::Process(TrialId("T"), 0, 0, spec, Batch({done}));
  EXPECT_TRUE(o.error.empty()) << o.error;

  spec = Spec(R"({"trainable": "q", "stop": {"eval/acc": 0.9}})");
  o = ResultProcessor::Process(TrialId("T"), 0, 0, spec, Batch({R(1)}));
  EXPECT_EQ(o.error,
            "stopping criterion 'eval/acc' not found (or not a number) in the result of iteration "
            "1 (the result reports: loss, training_iteration)");
}

}  // namespace
}  // namespace ztune::head
