// LogRelay on a fake clock: a worker's READ_LOG answer becomes the client's
// page; peers' malformed answers, silence and death become clear errors.
// Also the attempt hosts a trial record keeps for it.
#include "head/log_relay.h"

#include <string>

#include <gtest/gtest.h>

#include "common/base64.h"
#include "head/trial.h"

namespace ztune::head {
namespace {

protocol::Register Reg(const std::string& id) {
  protocol::Register r;
  r.worker_id = id;
  r.host = "node7";
  r.resources = {{"CPU", 1}};
  return r;
}

LogRead Read(uint64_t offset = 0, bool may_grow = false) {
  LogRead r;
  r.trial_id = TrialId("e0001_00000");
  r.attempt = 2;
  r.stream = "stdout";
  r.offset = offset;
  r.limit = 100;
  r.worker_id = WorkerId("w1");
  r.may_grow = may_grow;
  r.doc = Json{{"trial_id", "e0001_00000"}, {"attempt", 2}, {"attempts", {1, 2}}};
  return r;
}

protocol::Reply Answer(uint64_t rid, bool ok, Json data, std::string error = {}) {
  protocol::Reply r;
  r.rid = rid;
  r.trial_id = "e0001_00000";
  r.attempt = 2;
  r.ok = ok;
  r.error = std::move(error);
  r.data = std::move(data);
  return r;
}

class LogRelayTest : public ::testing::Test {
 protected:
  LogRelayTest() : registry_(clock_, /*expiry_ms=*/1000), relay_(clock_, /*timeout_ms=*/500) {
    registry_.Register(Reg("w1"));
  }
  FakeClock clock_;
  WorkerRegistry registry_;
  LogRelay relay_;
};

TEST_F(LogRelayTest, AnAnswerBecomesThePageWithTheClientsRid) {
  relay_.Wait(7, {"client-a", Json(41), false, nullptr}, Read(10));
  EXPECT_TRUE(relay_.Owns(7));
  auto a = relay_.OnReply(WorkerId("w1"), Answer(7, true, {{"size", 20}, {"live", false}}),
                          "0123456789");
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(relay_.Owns(7));
  EXPECT_EQ(a->client.identity, "client-a");
  const Json& r = a->reply;
  EXPECT_EQ(r["rid"], 41);
  EXPECT_EQ(r["ok"], true);
  EXPECT_EQ(r["offset"], 10);
  EXPECT_EQ(r["next_offset"], 20);
  EXPECT_EQ(r["size"], 20);
  EXPECT_EQ(r["complete"], true);
  EXPECT_EQ(r["attempts"], Json({1, 2}));
  EXPECT_EQ(*Base64Decode(r["data"].get<std::string>()), "0123456789");
}

TEST_F(LogRelayTest, ALiveActorOrTheCurrentAttemptIsNotComplete) {
  relay_.Wait(1, {"c", Json(1), false, nullptr}, Read());
  auto live = relay_.OnReply(WorkerId("w1"), Answer(1, true, {{"size", 0}, {"live", true}}), "");
  ASSERT_TRUE(live.has_value());
  EXPECT_EQ(live->reply["complete"], false);
  relay_.Wait(2, {"c", Json(2), false, nullptr}, Read(0, /*may_grow=*/true));
  auto growing =
      relay_.OnReply(WorkerId("w1"), Answer(2, true, {{"size", 0}, {"live", false}}), "");
  EXPECT_EQ(growing->reply["complete"], false);
  // The current attempt's output has not begun on the worker yet: empty.
  relay_.Wait(3, {"c", Json(3), false, nullptr}, Read(0, /*may_grow=*/true));
  auto early = relay_.OnReply(
      WorkerId("w1"), Answer(3, false, {{"code", "NotFound"}, {"live", false}}, "no stdout file"),
      "");
  EXPECT_EQ(early->reply["ok"], true);
  EXPECT_EQ(early->reply["size"], 0);
}

TEST_F(LogRelayTest, AWorkersRefusalIsTheClientsErrorWithWhereItHappened) {
  relay_.Wait(1, {"c", Json(9), false, nullptr}, Read());
  auto a = relay_.OnReply(
      WorkerId("w1"),
      Answer(1, false, {{"code", "NotFound"}, {"live", false}}, "no stdout file (/x/stdout)"), "");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->reply["rid"], 9);
  EXPECT_EQ(a->reply["ok"], false);
  EXPECT_EQ(a->reply["error"]["code"], "NotFound");
  const std::string message = a->reply["error"]["message"];
  EXPECT_NE(message.find("attempt 2 of trial e0001_00000 on worker w1"), std::string::npos);
  EXPECT_NE(message.find("only process trainables write stdout"), std::string::npos) << message;
}

TEST_F(LogRelayTest, MalformedOrMisdirectedAnswersChangeNothingOrFailClearly) {
  relay_.Wait(1, {"c", Json(1), false, nullptr}, Read());
  // Another worker answering this rid is not this read's answer.
  EXPECT_FALSE(
      relay_.OnReply(WorkerId("w2"), Answer(1, true, {{"size", 3}, {"live", false}}), "abc")
          .has_value());
  EXPECT_TRUE(relay_.Owns(1));
  // A size smaller than the bytes sent, a missing "live", more than the limit.
  for (const auto& [data, payload] : std::vector<std::pair<Json, std::string>>{
           {{{"size", 1}, {"live", false}}, "abc"},
           {{{"size", 3}}, "abc"},
           {{{"size", 300}, {"live", false}}, std::string(101, 'x')},
           {{{"size", "3"}, {"live", false}}, "abc"}}) {
    relay_.Wait(1, {"c", Json(1), false, nullptr}, Read());
    auto a = relay_.OnReply(WorkerId("w1"), Answer(1, true, data), payload);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->reply["ok"], false) << data.dump();
    EXPECT_EQ(a->reply["error"]["code"], "Internal");
  }
  EXPECT_EQ(relay_.size(), 0u);
}

TEST_F(LogRelayTest, SilenceAndDeathAreAnsweredUnavailable) {
  relay_.Wait(1, {"c", Json(1), false, nullptr}, Read());
  EXPECT_TRUE(relay_.TakeUnanswerable(registry_).empty());
  clock_.AdvanceMs(499);
  registry_.Touch(WorkerId("w1"));
  EXPECT_TRUE(relay_.TakeUnanswerable(registry_).empty());
  clock_.AdvanceMs(1);
  auto late = relay_.TakeUnanswerable(registry_);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].reply["error"]["code"], "Unavailable");
  EXPECT_NE(late[0].reply["error"]["message"].get<std::string>().find("no answer within 500 ms"),
            std::string::npos);

  relay_.Wait(2, {"c", Json(2), false, nullptr}, Read());
  registry_.MarkDead(WorkerId("w1"));
  auto dead = relay_.TakeUnanswerable(registry_);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].reply["rid"], 2);
  const std::string message = dead[0].reply["error"]["message"];
  EXPECT_NE(message.find("not connected"), std::string::npos);
  EXPECT_NE(message.find("on host node7"), std::string::npos) << message;
  // Its answer, arriving after all, is nobody's.
  EXPECT_FALSE(relay_.Owns(2));
}

TEST(AttemptHostsTest, KeptPerAttemptBoundedAndReadBackFromTheRecord) {
  Trial t;
  t.trial_id = TrialId("e0001_00000");
  t.experiment_id = "e0001";
  for (uint64_t a = 1; a <= Trial::kMaxAttemptHosts + 5; ++a) {
    t.attempt = a;
    t.NoteAttemptHost(WorkerId("w" + std::to_string(a % 3)));
  }
  t.NoteAttemptHost(WorkerId("again"));  // re-attached: same attempt, new host record
  ASSERT_EQ(t.attempt_hosts.size(), Trial::kMaxAttemptHosts);
  EXPECT_EQ(t.attempt_hosts.front().attempt, 6u);
  EXPECT_EQ(t.HostOf(t.attempt)->worker_id, WorkerId("again"));
  EXPECT_EQ(t.HostOf(5), nullptr);
  auto back = Trial::FromJson(t.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->attempt_hosts.size(), t.attempt_hosts.size());
  EXPECT_EQ(back->attempt_hosts.back().worker_id, WorkerId("again"));

  // Damage is Corruption, not a later CHECK.
  for (const Json& bad :
       {Json("x"), Json::array({Json::array({2, "w"}), Json::array({1, "w"})}),
        Json::array({Json::array({1})}), Json::array({Json::array({t.attempt + 1, "w"})})}) {
    Json j = t.ToJson();
    j["attempt_hosts"] = bad;
    EXPECT_EQ(Trial::FromJson(j).status().code(), StatusCode::kCorruption) << bad.dump();
  }
  // A record written before attempt hosts existed reads with none.
  Json old = t.ToJson();
  old.erase("attempt_hosts");
  ASSERT_TRUE(Trial::FromJson(old).ok());
  EXPECT_TRUE(Trial::FromJson(old)->attempt_hosts.empty());
}

}  // namespace
}  // namespace ztune::head
