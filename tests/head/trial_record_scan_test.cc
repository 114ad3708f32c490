// Reading a stored trial record without its DOM (head/trial_record_scan.h):
// whatever the reader takes, Trial::FromJson makes the same trial of the
// whole record's DOM; what it is unsure of, it leaves to that path.
#include "head/trial_record_scan.h"

#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/json.h"
#include "head/trial.h"

namespace ztune::head {
namespace {

const MetricKeys kMetrics = {{"e0001", "loss"}, {"e0002", "eval/acc"}};

// A trial with every member a record may hold, varied by `rng`.
Trial RandomTrial(std::mt19937_64& rng) {
  auto pick = [&](uint64_t n) { return rng() % n; };
  Trial t;
  t.experiment_id = pick(2) ? "e0001" : "e0002";
  t.trial_id = TrialIdFor(t.experiment_id, pick(100000));
  t.seq = rng();
  t.config = Json{{"lr", 1.0 / static_cast<double>(1 + pick(1000))}, {"layers", pick(8)}};
  if (pick(3) == 0) t.config["name"] = pick(2) ? "caf\u00e9" : "tab\there \"quoted\"";
  if (pick(5) == 0) t.config = Json::object();
  t.status = static_cast<TrialStatus>(pick(5));
  t.attempt = 1 + pick(5);
  t.num_failures = static_cast<int64_t>(pick(4)) - (pick(10) == 0 ? 3 : 0);
  t.iteration = static_cast<int64_t>(pick(1000));
  if (pick(4) != 0) {
    Json r = {{"training_iteration", t.iteration},
              {"loss", static_cast<double>(pick(1000)) / 7.0},
              {"eval", {{"acc", 0.5 + static_cast<double>(pick(100)) / 1000.0}}},
              {"done", pick(2) == 0}};
    if (pick(3) == 0) r["should_checkpoint"] = true;
    t.last_result = std::move(r);
  }
  t.next_checkpoint_id = 1 + pick(10);
  switch (pick(4)) {
    case 0: t.error = ""; break;
    case 1: t.error = "worker w1 died: no heartbeat for 3000 ms"; break;
    case 2:
      t.error = "Traceback (most recent call last):\n  File \"x.py\"\nValueError: \u00e9";
      break;
    case 3: t.error = "plain \\ backslash"; break;
  }
  t.start_time = pick(2) ? 1733356800.0 + static_cast<double>(pick(100000)) / 1000.0 : 0.0;
  t.end_time = pick(2) ? t.start_time + 12.25 : 0.0;
  t.num_restores = static_cast<int64_t>(pick(3));
  t.checkpoints_given_up_through = pick(3);
  t.held = pick(4) == 0;
  if (pick(3) == 0) t.restore_from = TrialIdFor(t.experiment_id, pick(10));
  if (pick(5) == 0) t.restarted_as = TrialIdFor(t.experiment_id, 100000 + pick(10));
  if (pick(2) == 0) t.actor_worker = WorkerId("w" + std::to_string(pick(100)));
  for (uint64_t b = 0, n = pick(3); b < n; ++b) {
    t.placement.bundles.push_back(BundlePlacement{
        WorkerId("w" + std::to_string(b)),
        ResourceSet::FromDoubles({{"CPU", 1.0 + static_cast<double>(b)}, {"GPU", 0.5}}),
        b == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{0, 3}});
  }
  for (uint64_t a = 1; a <= t.attempt; ++a) {
    if (pick(2) == 0) t.attempt_hosts.push_back(AttemptHost{a, WorkerId("w" + std::to_string(a))});
  }
  if (pick(4) == 0) t.exports = Json{{"json", "{\"a\": 1}"}};
  if (pick(3) == 0) t.scheduler_state = Json{{"bracket", pick(4)}, {"rungs", {1, 3, 9}}};
  t.pause_requested = pick(5) == 0;
  t.checkpoint_requested = pick(5) == 0;
  return t;
}

// The full parse of `text`, as a start falls back to.
Result<Trial> FullParse(const std::string& text) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Corruption("record is not JSON");
  return Trial::FromJson(j);
}

// Fails unless `got` (the reader's) is the trial the full parse makes.
void ExpectSameAsFullParse(const Trial& got, const std::string& text) {
  const Result<Trial> full = FullParse(text);
  ASSERT_TRUE(full.ok()) << "the reader took a record the full parse refuses: "
                         << full.status().ToString();
  // (Not ToRecordText: a last result kept as text keeps its spacing and key
  // order, the DOM's is sorted.)
  EXPECT_EQ(got.ToJson(), full->ToJson());
  for (const char* key : {"loss", "eval/acc", "done"}) {
    EXPECT_EQ(got.last_result.Metric(key), full->last_result.Metric(key)) << key;
  }
  EXPECT_EQ(got.last_result.Get(), full->last_result.Get());
}

TEST(TrialRecordScanTest, ReadsEveryRecordTheHeadWritesAsTheFullParseDoes) {
  std::mt19937_64 rng(7);
  for (int n = 0; n < 3000; ++n) {
    const Trial t = RandomTrial(rng);
    const std::string text = t.ToRecordText();
    SCOPED_TRACE(text);
    const std::optional<Trial> got = ReadTrialRecordText(text, &kMetrics);
    ASSERT_TRUE(got.has_value()) << "a record as written must not need the full parse";
    EXPECT_EQ(got->ToRecordText(), text);
    ExpectSameAsFullParse(*got, text);
    // The metric is read from the text, for the trial's own experiment.
    const std::string& metric = kMetrics.at(t.experiment_id);
    EXPECT_EQ(got->last_result.Metric(metric), t.last_result.Metric(metric));
    if (HasFatalFailure()) return;
  }
}

TEST(TrialRecordScanTest, TakesSpacingAndOrderAsJsonAllows) {
  std::mt19937_64 rng(11);
  Trial t = RandomTrial(rng);
  t.last_result = Json{{"loss", 0.25}, {"done", false}};
  Json j = t.ToJson();
  // nlohmann's pretty form: new lines, indentation, ": ".
  const std::string pretty = j.dump(2);
  const std::optional<Trial> got = ReadTrialRecordText(pretty, &kMetrics);
  ASSERT_TRUE(got.has_value()) << pretty;
  ExpectSameAsFullParse(*got, pretty);
  // Members in reverse order.
  std::string reversed = "{";
  for (auto it = j.items().begin(); it != j.items().end(); ++it) {
    reversed.insert(
        1, Json(it.key()).dump() + ":" + it.value().dump() + (reversed.size() > 1 ? "," : ""));
  }
  reversed += "}";
  const std::optional<Trial> back = ReadTrialRecordText(reversed, &kMetrics);
  ASSERT_TRUE(back.has_value()) << reversed;
  ExpectSameAsFullParse(*back, reversed);
}

// Each of these is read by the full parse (which may still take it, or name
// its damage): the reader cannot be sure to read it the same way.
TEST(TrialRecordScanTest, LeavesWhatItIsUnsureOfToTheFullParse) {
  Trial t;
  t.trial_id = TrialId("e0001_00000");
  t.experiment_id = "e0001";
  t.seq = 3;
  t.attempt = 2;
  t.iteration = 4;
  t.last_result = Json{{"loss", 0.5}};
  t.attempt_hosts.push_back(AttemptHost{2, WorkerId("w1")});
  const std::string text = t.ToRecordText();
  ASSERT_TRUE(ReadTrialRecordText(text, &kMetrics).has_value()) << text;
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = text;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? s : s.replace(at, from.size(), to);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"schema 1", replaced("\"held\":", "\"checkpoints\":[],\"held\":")},
      {"exploits", replaced("\"held\":", "\"exploits\":[],\"held\":")},
      {"an unknown key", replaced("\"held\":", "\"future\":1,\"held\":")},
      {"a key twice", replaced("\"held\":false", "\"held\":true,\"held\":false")},
      {"an escaped key", replaced("\"held\":", "\"h\\u0065ld\":")},
      {"a float for an integer", replaced("\"seq\":3", "\"seq\":3.0")},
      {"an integer past uint64", replaced("\"seq\":3", "\"seq\":18446744073709551616")},
      {"a leading zero", replaced("\"seq\":3", "\"seq\":03")},
      {"a string for an integer", replaced("\"seq\":3", "\"seq\":\"3\"")},
      {"a missing member", replaced("\"seq\":3,", "")},
      {"a number for a string", replaced("\"error\":\"\"", "\"error\":0")},
      {"a later attempt's host", replaced("[[2,\"w1\"]]", "[[3,\"w1\"]]")},
      {"hosts not increasing", replaced("[[2,\"w1\"]]", "[[2,\"w1\"],[2,\"w2\"]]")},
      {"a last result that is no object", replaced("{\"loss\":0.5}", "[0.5]")},
      {"done not a boolean", replaced("{\"loss\":0.5}", "{\"loss\":0.5,\"done\":1}")},
      {"a status it does not know", replaced("\"PENDING\"", "\"DONE\"")},
      {"an empty restarted_as", replaced("\"held\":", "\"restarted_as\":\"\",\"held\":")},
      {"a scheduler state that is no object", replaced("\"seq\":", "\"scheduler\":[],\"seq\":")},
      {"a huge exponent", replaced("\"start_time\":0.0", "\"start_time\":1e99999")},
      // nlohmann skips a byte order mark at the start of what it parses: a
      // value's own text must not be handed to it with one.
      {"a byte order mark before a value",
       replaced("\"exports\":null", "\"exports\":\xEF\xBB\xBFnull")},
      {"a byte order mark before a container",
       replaced("\"config\":{}", "\"config\":\xEF\xBB\xBF{}")},
      {"a byte order mark first", "\xEF\xBB\xBF" + text},
      {"trailing text", text + "x"},
      {"a trailing comma", text.substr(0, text.size() - 1) + ",}"},
      {"cut short", text.substr(0, text.size() - 1)},
      {"an empty object", "{}"},
      {"not an object", "[]"},
  };
  for (const auto& [name, record] : cases) {
    EXPECT_FALSE(ReadTrialRecordText(record, &kMetrics).has_value()) << name << ": " << record;
  }
  // Values it reads itself although they are not the head's own: what the
  // DOM makes of them.
  for (const std::string& record :
       {replaced("\"seq\":3", "\"seq\":-3"),  // a uint64 from an int64, cast as get<> does
        replaced("\"iteration\":4", "\"iteration\":18446744073709551615"),
        replaced("\"start_time\":0.0", "\"start_time\":17"),
        replaced("\"start_time\":0.0", "\"start_time\":-1.5E-3"),
        replaced("\"error\":\"\"", "\"error\":\"a\\nb \\u00e9 \\ud83d\\ude00\"")}) {
    const std::optional<Trial> got = ReadTrialRecordText(record, &kMetrics);
    ASSERT_TRUE(got.has_value()) << record;
    ExpectSameAsFullParse(*got, record);
  }
}

// Random damage to records as written: whatever the reader still takes, the
// full parse takes too, and reads as the same trial.
TEST(TrialRecordScanTest, WhatItTakesOfDamagedRecordsTheFullParseReadsTheSame) {
  std::mt19937_64 rng(3);
  const std::string alphabet = "{}[]\":,\\ 0123456789.eE-+tfnul\x80\xc3\xa9x";
  int taken = 0;
  for (int n = 0; n < 20000; ++n) {
    std::string text = RandomTrial(rng).ToRecordText();
    for (uint64_t k = 0, edits = 1 + rng() % 3; k < edits; ++k) {
      const size_t at = rng() % text.size();
      switch (rng() % 5) {
        case 0: text[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: text.erase(at, 1 + rng() % 4); break;
        case 2: text.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        case 3: text.insert(at, std::string(1 + rng() % 3, ' ')); break;
        case 4: text.insert(at, "\xEF\xBB\xBF"); break;  // a byte order mark
      }
      if (text.empty()) text = "{";
    }
    const std::optional<Trial> got = ReadTrialRecordText(text, &kMetrics);
    if (!got) continue;
    ++taken;
    SCOPED_TRACE(text);
    ExpectSameAsFullParse(*got, text);
    if (HasFatalFailure()) return;
  }
  // Spaces between tokens and edits inside strings leave many readable.
  EXPECT_GT(taken, 2000);
}

}  // namespace
}  // namespace ztune::head
