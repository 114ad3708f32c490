// The ztune commands against a FakeHead with canned docs: human tables,
// --json documents, CSV, exit codes and `wait`.
#include "client/commands.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "tests/client/fake_head.h"

namespace ztune::client {
namespace {

using testing::ClientOptions;
using testing::ErrorReply;
using testing::FakeHead;
using testing::Frames;
using testing::OkReply;
using testing::ReplyFrames;

Json Experiment(bool finished = false) {
  return Json{
      {"experiment_id", "e0001"},
      {"name", "mnist"},
      {"trainable", "quadratic"},
      {"status", finished ? "TERMINATED" : "RUNNING"},
      {"metric", "loss"},
      {"mode", "min"},
      {"created_at", 1700000000.5},
      {"total_trials", 3},
      {"trial_counts",
       finished
           ? Json{{"PENDING", 0}, {"RUNNING", 0}, {"PAUSED", 0}, {"TERMINATED", 2}, {"ERROR", 1}}
           : Json{{"PENDING", 1}, {"RUNNING", 1}, {"PAUSED", 0}, {"TERMINATED", 1}, {"ERROR", 0}}},
      {"finished", finished},
      {"best_trial",
       {{"trial_id", "e0001_00000"},
        {"metric", "loss"},
        {"value", 0.00121},
        {"iteration", 50},
        {"config", {{"lr", 0.01}}}}},
      {"spec", {{"name", "mnist"}, {"trainable", "quadratic"}}},
  };
}

Json Trial(const std::string& id, const std::string& status, Json config, int iteration,
           Json last_result, Json worker) {
  return Json{
      {"trial_id", id},
      {"experiment_id", "e0001"},
      {"status", status},
      // What the head reports: an attempt saving its checkpoint.
      {"phase", status == "RUNNING" ? "saving" : "idle"},
      {"config", std::move(config)},
      {"num_failures", status == "ERROR" ? 1 : 0},
      {"attempt", 1},
      {"iteration", iteration},
      {"last_result", std::move(last_result)},
      {"worker", std::move(worker)},
      {"error", status == "ERROR" ? Json("Traceback:\n  boom") : Json(nullptr)},
      {"resources", {{"bundles", Json::array({{{"CPU", 1}}})}, {"strategy", "PACK"}}},
      {"checkpoints", Json::array({{{"id", "c1"}, {"iteration", 10}, {"storage", "persistent"}}})},
      {"start_time", 1700000001.0},
      {"end_time", nullptr}};
}

Json Trials() {
  return Json::array({
      Trial("e0001_00000", "TERMINATED", {{"lr", 0.01}, {"model", {{"layers", 3}}}}, 50,
            {{"loss", 0.00121}, {"training_iteration", 50}}, "worker-a"),
      Trial("e0001_00001", "RUNNING", {{"lr", 0.1}, {"model", {{"layers", 5}}}}, 7,
            {{"loss", 0.5}, {"training_iteration", 7}}, "worker-b"),
      Trial("e0001_00002", "PENDING", {{"lr", 1e-5}, {"model", {{"layers", 2}}}}, 0, nullptr,
            nullptr),
  });
}

Json StatusFields() {
  return Json{
      {"experiments", Json::array({Experiment()})},
      {"trials", Trials()},
      {"resources", {{"used", {{"CPU", 3}, {"GPU", 0}}}, {"total", {{"CPU", 4}, {"GPU", 0}}}}},
      {"workers_alive", 2}};
}

Json Worker() {
  return Json{{"worker_id", "w-1"},
              {"name", "worker-a"},
              {"host", "node1"},
              {"pid", 4242},
              {"alive", true},
              {"resources_total", {{"CPU", 4}, {"GPU", 1}, {"memory", 8e9}}},
              {"resources_available", {{"CPU", 1}, {"GPU", 0.5}, {"memory", 8e9}}},
              {"gpu_ids", {0}},
              {"actors", 3},
              {"last_seen_ms_ago", 120}};
}

Json Results() {
  return Json::array({
      {{"training_iteration", 1},
       {"done", false},
       {"time_this_iter_s", 0.5},
       {"time_total_s", 0.5},
       {"timestamp", 1700000002},
       {"trial_id", "e0001_00000"},
       {"loss", 0.9},
       {"eval", {{"acc", 0.5}, {"f1", 0.25}}},
       {"note", "a, \"quoted\" note"}},
      {{"training_iteration", 2},
       {"done", true},
       {"time_this_iter_s", 0.25},
       {"time_total_s", 0.75},
       {"timestamp", 1700000003},
       {"trial_id", "e0001_00000"},
       {"loss", 0.1},
       {"eval", {{"acc", 0.75}}},
       {"extra", 7}},
  });
}

Json HeadStats() {
  Json times = Json::object();
  for (const char* phase : {"turn", "drain", "handle", "commit", "send", "result_wait"}) {
    times[phase] = {{"count", 120},
                    {"p50_ms", 0.7},
                    {"p99_ms", 3.58},
                    {"max_ms", 6.66},
                    {"buckets", Json::array({Json::array({719, 60}), Json::array({6663, 60})})}};
  }
  times["result_wait"]["p99_ms"] = 41.5;
  times["result_wait"]["max_ms"] = 45;
  return {{"uptime_s", 12.5},
          {"turns", 5000},
          {"commits", 120},
          {"commits_behind_loop", 90},
          {"messages_in", 7000},
          {"result_batches", 6000},
          {"trains_in_acks", 40},
          {"heartbeats_sent", 33},
          {"worker_sends_dropped", 4},
          {"malformed", 2},
          {"unknown_senders", 0},
          {"unauthorized", 0},
          {"rate_limited", 1},
          {"slow_store_operations", 0},
          {"times", std::move(times)}};
}

std::map<std::string, Json> CannedOps() {
  return {
      {"status", StatusFields()},
      {"experiments", Json{{"experiments", Json::array({Experiment()})}}},
      {"experiment", Json{{"experiment", Experiment()}}},
      {"trials", Json{{"trials", Trials()}}},
      {"trial", Json{{"trial", Trials()[0]}}},
      {"results", Json{{"trial_id", "e0001_00000"}, {"results", Results()}}},
      {"workers", Json{{"workers", Json::array({Worker()})}}},
      {"head_stats", Json{{"head", HeadStats()}}},
      {"stop", Json{{"stopped", {"e0001_00001", "e0001_00002"}}}},
      {"submit", Json{{"experiment_id", "e0007"}, {"total_trials", 16}}},
      {"add_trial", Json{{"trial_id", "e0001_00003"}}},
  };
}

class CommandsTest : public ::testing::Test {
 protected:
  explicit CommandsTest(FakeHead::Handler handler = FakeHead::Canned(CannedOps()))
      : head_(std::move(handler)), client_(ClientOptions(head_.endpoint())) {}

  CommandContext Ctx() { return CommandContext{client_, out_, err_}; }

  // Parses stdout as exactly one JSON document.
  Json OutJson() {
    Json j = Json::parse(out_.str(), nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << out_.str();
    return j;
  }

  std::vector<std::string> OutLines() {
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  }

  FakeHead head_;
  HeadClient client_;
  std::ostringstream out_;
  std::ostringstream err_;
};

bool HasLine(const std::vector<std::string>& lines, const std::string& want) {
  for (const auto& l : lines) {
    if (l == want) return true;
  }
  return false;
}

// Header line of the trial table (the line starting with "Trial").
std::string TableHeader(const std::vector<std::string>& lines) {
  for (const auto& l : lines) {
    if (l.rfind("Trial ", 0) == 0) return l;
  }
  return "";
}

TEST_F(CommandsTest, StatusShowsResourcesLineAndParameterColumns) {
  ASSERT_EQ(RunStatus(Ctx(), "", StatusOptions{}), kExitOk) << err_.str();
  const auto lines = OutLines();
  EXPECT_TRUE(HasLine(lines, "== Status ==")) << out_.str();
  EXPECT_TRUE(HasLine(lines,
                      "Experiment e0001 (mnist): RUNNING \u2014 3 trials: 1 RUNNING, "
                      "1 PENDING, 1 TERMINATED"))
      << out_.str();
  EXPECT_TRUE(HasLine(lines, "Resources: CPU 3/4, GPU 0/0")) << out_.str();
  EXPECT_TRUE(HasLine(lines, "Best trial: e0001_00000 loss=0.00121 (iteration 50)")) << out_.str();

  const std::string header = TableHeader(lines);
  for (const char* col : {"status", "worker", "lr", "model/layers", "iter", "loss"}) {
    EXPECT_NE(header.find(col), std::string::npos) << col << " missing in: " << header;
  }
  EXPECT_LT(header.find("lr"), header.find("iter"));
  EXPECT_NE(out_.str().find("1e-05"), std::string::npos);
  EXPECT_NE(out_.str().find("worker-b"), std::string::npos);
  // A RUNNING trial's phase shows unless it is training; idle never shows.
  EXPECT_NE(out_.str().find("RUNNING (saving)"), std::string::npos) << out_.str();
  EXPECT_EQ(out_.str().find("(idle)"), std::string::npos) << out_.str();
  EXPECT_EQ(head_.requests()[0]["op"], "status");
  EXPECT_FALSE(head_.requests()[0].contains("experiment_id"));
}

TEST_F(CommandsTest, StatusPassesExperimentId) {
  ASSERT_EQ(RunStatus(Ctx(), "e0001", StatusOptions{}), kExitOk);
  EXPECT_EQ(head_.requests()[0]["experiment_id"], "e0001");
}

TEST(RenderStatusTest, NamesTheSchedulerUnlessFifo) {
  Json reply = StatusFields();
  EXPECT_EQ(RenderStatus(reply, StatusOptions{}).find("Scheduler:"), std::string::npos);
  reply["experiments"][0]["spec"]["scheduler"] = Json{{"type", "fifo"}};
  EXPECT_EQ(RenderStatus(reply, StatusOptions{}).find("Scheduler:"), std::string::npos);
  reply["experiments"][0]["spec"]["scheduler"] =
      Json{{"type", "asha"},        {"time_attr", "training_iteration"},
           {"max_t", 27},           {"grace_period", 1},
           {"reduction_factor", 3}, {"metric", "loss"}};
  const std::string text = RenderStatus(reply, StatusOptions{});
  EXPECT_NE(text.find("Scheduler: asha (time_attr training_iteration, max_t 27, grace_period 1, "
                      "reduction_factor 3)\n"),
            std::string::npos)
      << text;
}

TEST(RenderStatusTest, ShowsTheExperimentsWarnings) {
  Json reply = StatusFields();
  EXPECT_EQ(RenderStatus(reply, StatusOptions{}).find("Warning:"), std::string::npos);
  reply["experiments"][0]["warnings"] = Json::array({"no stop condition: trials run forever"});
  const std::string text = RenderStatus(reply, StatusOptions{});
  EXPECT_NE(text.find("Warning: no stop condition: trials run forever\n"), std::string::npos)
      << text;
}

// Issue 14: the rows come in the order docs/cli.md promises, live ones
// first, whether or not the table is cut (RUNNING trials were printed last).
TEST(RenderStatusTest, ListsLiveTrialsFirstInTheDocumentedOrder) {
  Json reply = StatusFields();
  const char* statuses[] = {"TERMINATED", "PENDING", "ERROR", "RUNNING", "PAUSED", "RUNNING"};
  Json trials = Json::array();
  for (int i = 0; i < 6; ++i) {
    trials.push_back(
        Trial("e0001_0000" + std::to_string(i), statuses[i], {{"lr", i}}, 0, nullptr, nullptr));
  }
  reply["trials"] = trials;
  const std::string text = RenderStatus(reply, StatusOptions{});
  const size_t table = text.find("\nTrial ");  // the best-trial line names a trial too
  ASSERT_NE(table, std::string::npos) << text;
  std::vector<size_t> at;
  for (const char* id :
       {"e0001_00003", "e0001_00005", "e0001_00002", "e0001_00004", "e0001_00001", "e0001_00000"}) {
    at.push_back(text.find(id, table));
    ASSERT_NE(at.back(), std::string::npos) << id << " missing in\n" << text;
  }
  EXPECT_TRUE(std::is_sorted(at.begin(), at.end()))
      << "RUNNING (3, 5), ERROR (2), PAUSED (4), PENDING (1), TERMINATED (0):\n"
      << text;
}

TEST(RenderStatusTest, TruncatesToMaxRowsUnlessAll) {
  Json reply = StatusFields();
  Json trials = Json::array();
  for (int i = 0; i < 30; ++i) {
    char id[32];
    std::snprintf(id, sizeof(id), "e0001_%05d", i);
    trials.push_back(Trial(id, i == 25 ? "RUNNING" : "PENDING", {{"lr", i}}, 0, nullptr, nullptr));
  }
  reply["trials"] = trials;
  StatusOptions options;
  options.max_rows = 5;
  const std::string text = RenderStatus(reply, options);
  EXPECT_NE(text.find("e0001_00025"), std::string::npos) << "running trials are shown first";
  EXPECT_NE(text.find("... 25 more trials not shown (25 PENDING)"), std::string::npos) << text;
  options.all = true;
  const std::string all = RenderStatus(reply, options);
  EXPECT_NE(all.find("e0001_00029"), std::string::npos);
  EXPECT_EQ(all.find("more trials"), std::string::npos);
}

TEST(RenderStatusTest, FormatsFractionalAndCustomResources) {
  Json resources{{"used", {{"CPU", 0.5}, {"GPU", 0.25}, {"accel", 1}}},
                 {"total", {{"CPU", 4}, {"GPU", 1}, {"accel", 2}, {"memory", 17179869184.0}}}};
  EXPECT_EQ(FormatResources(resources), "CPU 0.5/4, GPU 0.25/1, accel 1/2, memory 0/17179869184");
  EXPECT_EQ(FormatResources(Json::object()), "CPU 0/0, GPU 0/0");
}

TEST(RenderStatusTest, ShowsErroredTrialsAndNoExperiments) {
  Json reply = StatusFields();
  reply["trials"][1]["status"] = "ERROR";
  reply["trials"][1]["error"] = "ValueError: bad lr\nmore";
  reply["trials"][1]["num_failures"] = 2;
  const std::string text = RenderStatus(reply, StatusOptions{});
  EXPECT_NE(text.find("Number of errored trials: 1"), std::string::npos) << text;
  EXPECT_NE(text.find("ValueError: bad lr"), std::string::npos);

  Json empty = StatusFields();
  empty["experiments"] = Json::array();
  empty["trials"] = Json::array();
  EXPECT_NE(RenderStatus(empty, StatusOptions{}).find("No experiments."), std::string::npos);
}

TEST(RenderStatusTest, SurvivesMalformedDocs) {
  Json reply{{"experiments", Json::array({42, Json::object(), {{"trial_counts", "x"}}})},
             {"trials", Json::array({"nope", {{"config", 3}, {"last_result", "x"}}})},
             {"resources", {{"used", "?"}}}};
  EXPECT_FALSE(RenderStatus(reply, StatusOptions{}).empty());
  EXPECT_FALSE(RenderStatus(Json("not an object"), StatusOptions{}).empty());
}

TEST_F(CommandsTest, JsonOutputsParseAndCarryDocumentedFields) {
  struct Case {
    std::function<int(const CommandContext&)> run;
    std::vector<std::string> fields;
  };
  std::vector<Case> cases = {
      {[](const CommandContext& c) { return RunStatus(c, "", StatusOptions{.json = true}); },
       {"experiments", "trials", "resources", "workers_alive"}},
      {[](const CommandContext& c) { return RunExperiments(c, true); }, {"experiments"}},
      {[](const CommandContext& c) { return RunTrials(c, "e0001", true); }, {"trials"}},
      {[](const CommandContext& c) { return RunTrial(c, "e0001_00000", true); }, {"trial"}},
      {[](const CommandContext& c) { return RunResults(c, "e0001_00000", ResultsFormat::kJson); },
       {"trial_id", "results"}},
      {[](const CommandContext& c) { return RunWorkers(c, true); }, {"workers"}},
      {[](const CommandContext& c) { return RunHeadStats(c, true); }, {"head"}},
      {[](const CommandContext& c) { return RunStop(c, "e0001", true); }, {"stopped"}},
      {[](const CommandContext& c) { return RunAddTrial(c, "e0001", "{\"lr\": 1}", true); },
       {"trial_id"}},
  };
  for (const Case& c : cases) {
    out_.str("");
    ASSERT_EQ(c.run(Ctx()), kExitOk) << err_.str();
    Json j = OutJson();
    ASSERT_TRUE(j.is_object()) << out_.str();
    EXPECT_FALSE(j.contains("rid"));
    EXPECT_FALSE(j.contains("ok"));
    EXPECT_EQ(j.size(), c.fields.size()) << out_.str();
    for (const auto& f : c.fields) EXPECT_TRUE(j.contains(f)) << f << " in " << out_.str();
  }
  out_.str("");
  ASSERT_EQ(RunStatus(Ctx(), "", StatusOptions{.json = true}), kExitOk);
  Json status = OutJson();
  EXPECT_EQ(status["resources"]["total"]["CPU"], 4);
  EXPECT_EQ(status["trials"][0]["config"]["model"]["layers"], 3);
}

TEST_F(CommandsTest, HumanTablesRender) {
  ASSERT_EQ(RunExperiments(Ctx(), false), kExitOk);
  EXPECT_NE(out_.str().find("e0001_00000 loss=0.00121"), std::string::npos) << out_.str();
  out_.str("");
  ASSERT_EQ(RunTrials(Ctx(), "e0001", false), kExitOk);
  const std::string trials = out_.str();
  EXPECT_NE(TableHeader(OutLines()).find("model/layers"), std::string::npos) << trials;
  EXPECT_NE(TableHeader(OutLines()).find("loss"), std::string::npos) << trials;
  out_.str("");
  ASSERT_EQ(RunWorkers(Ctx(), false), kExitOk);
  EXPECT_NE(out_.str().find("3/4"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("0.5/1"), std::string::npos) << out_.str();
  out_.str("");
  ASSERT_EQ(RunHeadStats(Ctx(), false), kExitOk);
  const std::vector<std::string> head_lines = OutLines();
  ASSERT_FALSE(head_lines.empty());
  EXPECT_EQ(head_lines[0],
            "Head up 12.5 s: 5000 turns, 120 commits (90 behind the loop), 7000 messages in, "
            "6000 result batches, 40 TRAINs sent inside ACKs, 33 heartbeats sent, 4 messages to "
            "workers dropped (no connection).");
  EXPECT_TRUE(HasLine(head_lines, "result_wait  120    0.7  41.5  45")) << out_.str();
  EXPECT_TRUE(HasLine(head_lines, "commit       120    0.7  3.58  6.66")) << out_.str();
  out_.str("");
  ASSERT_EQ(RunTrial(Ctx(), "e0001_00000", false), kExitOk);
  EXPECT_NE(out_.str().find("model/layers: 3"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("persistent"), std::string::npos) << out_.str();
  out_.str("");
  ASSERT_EQ(RunResults(Ctx(), "e0001_00000", ResultsFormat::kTable), kExitOk);
  EXPECT_NE(out_.str().find("eval/acc"), std::string::npos) << out_.str();
  EXPECT_EQ(out_.str().find("timestamp"), std::string::npos) << out_.str();
  out_.str("");
  ASSERT_EQ(RunStop(Ctx(), "e0001", false), kExitOk);
  EXPECT_EQ(out_.str(), "e0001_00001\ne0001_00002\n");
}

TEST(ResultsCsvTest, FlattensNestedMetricsAndQuotes) {
  const std::string csv = ResultsCsv(Results());
  std::istringstream in(csv);
  std::string header, row1, row2, extra;
  std::getline(in, header);
  std::getline(in, row1);
  std::getline(in, row2);
  EXPECT_FALSE(std::getline(in, extra));
  EXPECT_EQ(header,
            "training_iteration,done,eval/acc,eval/f1,extra,loss,note,time_this_iter_s,"
            "time_total_s,timestamp,trial_id");
  EXPECT_EQ(row1,
            "1,false,0.5,0.25,,0.9,\"a, \"\"quoted\"\" note\",0.5,0.5,1700000002,e0001_00000");
  EXPECT_EQ(row2, "2,true,0.75,,7,0.1,,0.25,0.75,1700000003,e0001_00000");
}

TEST_F(CommandsTest, ResultsCsvCommandPrintsCsv) {
  ASSERT_EQ(RunResults(Ctx(), "e0001_00000", ResultsFormat::kCsv), kExitOk);
  EXPECT_EQ(out_.str(), ResultsCsv(Results()));
  EXPECT_EQ(head_.requests()[0]["trial_id"], "e0001_00000");
}

TEST_F(CommandsTest, SubmitPrintsExperimentId) {
  const std::string path = ::testing::TempDir() + "/spec_ok.json";
  std::ofstream(path) << R"({"name": "mnist", "param_space": {"lr": {"grid_search": [1, 2]}}})";
  ASSERT_EQ(RunSubmit(Ctx(), path, false), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "e0007\n");
  EXPECT_EQ(head_.requests()[0]["op"], "submit");
  EXPECT_EQ(head_.requests()[0]["spec"]["name"], "mnist");
}

TEST_F(CommandsTest, SubmitRejectsBadSpecWithoutSending) {
  const std::string bad = ::testing::TempDir() + "/spec_bad.json";
  std::ofstream(bad) << "{ not json";
  EXPECT_EQ(RunSubmit(Ctx(), bad, false), kExitUsage);
  EXPECT_NE(err_.str().find("not valid JSON"), std::string::npos) << err_.str();
  const std::string array = ::testing::TempDir() + "/spec_array.json";
  std::ofstream(array) << "[1, 2]";
  EXPECT_EQ(RunSubmit(Ctx(), array, false), kExitUsage);
  EXPECT_EQ(RunSubmit(Ctx(), ::testing::TempDir() + "/does_not_exist.json", false), kExitUsage);
  EXPECT_EQ(RunAddTrial(Ctx(), "e0001", "[1]", false), kExitUsage);
  EXPECT_EQ(RunAddTrial(Ctx(), "e0001", "{", false), kExitUsage);
  EXPECT_TRUE(head_.requests().empty());
  EXPECT_TRUE(out_.str().empty());
}

TEST_F(CommandsTest, AddTrialPrintsTrialId) {
  ASSERT_EQ(RunAddTrial(Ctx(), "e0001", R"({"lr": 0.5, "model": {"layers": 4}})", false), kExitOk);
  EXPECT_EQ(out_.str(), "e0001_00003\n");
  EXPECT_EQ(head_.requests()[0]["config"]["model"]["layers"], 4);
  EXPECT_EQ(head_.requests()[0]["experiment_id"], "e0001");
  EXPECT_FALSE(head_.requests()[0].contains("wait_ms"));  // adds at once, slot or not
}

TEST_F(CommandsTest, AddTrialWithWaitAsksForAFreeSlot) {
  ASSERT_EQ(RunAddTrial(Ctx(), "e0001", R"({"lr": 0.5})", false, "", 2.5), kExitOk);
  EXPECT_EQ(head_.requests()[0]["wait_ms"], 2500);
  EXPECT_EQ(out_.str(), "e0001_00003\n");
}

class ErroredTrialTest : public CommandsTest {
 protected:
  ErroredTrialTest()
      : CommandsTest(
            FakeHead::Canned({{"trial", Json{{"trial", Trial("e0001_00001", "ERROR", {{"lr", 0.1}},
                                                             3, nullptr, "worker-b")}}}})) {}
};

TEST_F(ErroredTrialTest, TrialShowsErrorText) {
  ASSERT_EQ(RunTrial(Ctx(), "e0001_00001", false), kExitOk);
  const std::string text = out_.str();
  EXPECT_NE(text.find("status:"), std::string::npos) << text;
  EXPECT_NE(text.find("ERROR"), std::string::npos) << text;
  EXPECT_NE(text.find("error:\n  Traceback:\n    boom\n"), std::string::npos) << text;
  EXPECT_NE(text.find("last_result:\n  (none)"), std::string::npos) << text;
}

// The human view shows everything docs/cli.md promises: restores, exports
// (a long one summarised), every failure.
TEST(TrialViewTest, ShowsRestoresExportsAndEveryFailure) {
  Json trial = Trial("e0001_00001", "TERMINATED", {{"lr", 0.1}}, 20, nullptr, nullptr);
  trial["num_restores"] = 2;
  trial["held"] = false;
  trial["restore_from"] = "e0001_00000";
  trial["error"] = nullptr;
  trial["error_log"] = Json::array({"Failure # 1 (occurred at 2026-12-04_03-20-39)\nboom",
                                    "Failure # 2 (occurred at 2026-12-04_03-21-00)\nbang"});
  trial["exports"] = {{"summary", "accuracy 0.98\nepochs 20"}, {"weights", std::string(5000, '7')}};
  FakeHead head(FakeHead::Canned({{"trial", Json{{"trial", trial}}}}));
  HeadClient client(ClientOptions(head.endpoint()));
  std::ostringstream out, err;
  ASSERT_EQ(RunTrial(CommandContext{client, out, err}, "e0001_00001", false), kExitOk);
  const std::string text = out.str();
  EXPECT_NE(text.find("\nnum_restores:   2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nrestore_from:   e0001_00000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("exports:\n  summary:\n    accuracy 0.98\n    epochs 20\n"
                      "  weights: (5000 bytes; `ztune trial ID --json` has it whole)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("error: -\nerror_log (every failure, oldest first):\n"
                      "  Failure # 1 (occurred at 2026-12-04_03-20-39)\n  boom\n"
                      "  Failure # 2 (occurred at 2026-12-04_03-21-00)\n  bang\n"),
            std::string::npos)
      << text;
}

// A head that pages: `trials` and `results` answer at most 2 items per call,
// as the real head answers 500 trials or 1,000 results, with next_offset.
class PagingHeadTest : public CommandsTest {
 protected:
  static constexpr uint64_t kItems = 5;
  PagingHeadTest()
      : CommandsTest([](const Json& req) -> std::vector<Frames> {
          const std::string op = req.value("op", "");
          const uint64_t offset = req.value("offset", uint64_t{0});
          Json items = Json::array();
          for (uint64_t i = offset; i < std::min(offset + 2, kItems); ++i) {
            if (op == "results") {
              items.push_back(Json{{"training_iteration", i + 1}, {"trial_id", "e0001_00000"}});
            } else {
              char id[32];
              std::snprintf(id, sizeof(id), "e0001_%05llu", static_cast<unsigned long long>(i));
              items.push_back(Trial(id, "RUNNING", {{"lr", 0.1}}, 1, nullptr, "w"));
            }
          }
          Json reply{{op == "results" ? "results" : "trials", items},
                     {"offset", offset},
                     {"next_offset", offset + 2 < kItems ? Json(offset + 2) : Json()},
                     {"total", kItems}};
          if (op == "results") reply["trial_id"] = "e0001_00000";
          return {ReplyFrames(OkReply(req, reply))};
        }) {}
};

// Every page is read, in order (a reply moved from before its next_offset
// was read made every paged read stop after its first page).
TEST_F(PagingHeadTest, ReadsEveryPage) {
  ASSERT_EQ(RunResults(Ctx(), "e0001_00000", ResultsFormat::kJson), kExitOk) << err_.str();
  Json results = OutJson()["results"];
  ASSERT_EQ(results.size(), kItems) << results.dump();
  for (uint64_t i = 0; i < kItems; ++i) EXPECT_EQ(results[i]["training_iteration"], i + 1);
  EXPECT_EQ(head_.requests().size(), 3u);

  out_.str("");
  ASSERT_EQ(RunTrials(Ctx(), "e0001", /*json=*/true), kExitOk) << err_.str();
  Json trials = OutJson()["trials"];
  ASSERT_EQ(trials.size(), kItems) << trials.dump();
  EXPECT_EQ(trials[4]["trial_id"], "e0001_00004");
  EXPECT_FALSE(OutJson().contains("next_offset"));
}

class ErrorHeadTest : public CommandsTest {
 protected:
  ErrorHeadTest()
      : CommandsTest([](const Json& req) -> std::vector<Frames> {
          return {ReplyFrames(ErrorReply(req, "NotFound", "no experiment e0042"))};
        }) {}
};

TEST_F(ErrorHeadTest, HeadErrorExitsOneWithCodeAndMessage) {
  EXPECT_EQ(RunTrials(Ctx(), "e0042", false), kExitHeadError);
  EXPECT_EQ(err_.str(), "error: NotFound: no experiment e0042\n");
  EXPECT_TRUE(out_.str().empty());
  EXPECT_EQ(RunWait(Ctx(), "e0042", WaitOptions{}, SteadyClock()), kExitHeadError);
}

TEST(UnreachableHeadTest, ExitsThreeWithEndpointInMessage) {
  HeadClientOptions o;
  o.endpoint = "tcp://127.0.0.1:1";
  o.timeout_ms = 100;
  HeadClient client(o);
  std::ostringstream out, err;
  CommandContext ctx{client, out, err};
  EXPECT_EQ(RunStatus(ctx, "", StatusOptions{}), kExitUnreachable);
  // Within a timeout this short the refusal may or may not have been seen:
  // "cannot connect to the head at E: connection refused for 100 ms; is
  // ztune-head running at E?" or "no reply from head at E within 100 ms; is
  // ztune-head running there?".
  const std::string e = err.str();
  EXPECT_EQ(e.rfind("error: ", 0), 0u) << e;
  EXPECT_NE(e.find("tcp://127.0.0.1:1"), std::string::npos) << e;
  EXPECT_NE(e.find("100 ms; is ztune-head running"), std::string::npos) << e;
  EXPECT_TRUE(out.str().empty());
}

// RUNNING -> RUNNING -> finished: wait polls until finished and exits 0
class WaitTest : public CommandsTest {
 protected:
  WaitTest()
      : CommandsTest([this](const Json& req) -> std::vector<Frames> {
          const bool finished = ++polls_ >= 3;
          return {ReplyFrames(OkReply(req, Json{{"experiment", Experiment(finished)}}))};
        }) {}
  std::atomic<int> polls_{0};
};

TEST_F(WaitTest, ReturnsZeroWhenFinished) {
  WaitOptions options;
  options.interval_ms = 10;
  options.timeout_s = 10;
  options.json = true;
  ASSERT_EQ(RunWait(Ctx(), "e0001", options, SteadyClock()), kExitOk) << err_.str();
  EXPECT_EQ(polls_.load(), 3);
  Json doc = OutJson();
  EXPECT_EQ(doc["experiment_id"], "e0001");
  EXPECT_EQ(doc["finished"], true);
  for (const Json& r : head_.requests()) {
    EXPECT_EQ(r["op"], "experiment");
    EXPECT_EQ(r["experiment_id"], "e0001");
  }
}

TEST_F(WaitTest, PrintsSummaryWithoutJson) {
  WaitOptions options;
  options.interval_ms = 10;
  ASSERT_EQ(RunWait(Ctx(), "e0001", options, SteadyClock()), kExitOk);
  EXPECT_EQ(out_.str(),
            "Experiment e0001 (mnist): TERMINATED \u2014 3 trials: 2 TERMINATED, 1 ERROR\n"
            "Best trial: e0001_00000 loss=0.00121 (iteration 50)\n");
  EXPECT_NE(err_.str().find("RUNNING"), std::string::npos) << "progress goes to stderr";
}

TEST_F(CommandsTest, WaitReturnsFourOnTimeout) {
  // The canned experiment never finishes.
  WaitOptions options;
  options.interval_ms = 20;
  options.timeout_s = 0.1;
  ASSERT_EQ(RunWait(Ctx(), "e0001", options, SteadyClock()), kExitWaitTimeout);
  EXPECT_NE(err_.str().find("not finished after 0.1 s"), std::string::npos) << err_.str();
  EXPECT_GE(head_.requests().size(), 2u);
  EXPECT_TRUE(out_.str().empty());
}

TEST_F(CommandsTest, WaitWithZeroTimeoutPollsOnce) {
  WaitOptions options;
  options.timeout_s = 0;
  options.json = true;
  EXPECT_EQ(RunWait(Ctx(), "e0001", options, SteadyClock()), kExitWaitTimeout);
  EXPECT_EQ(head_.requests().size(), 1u);
  EXPECT_EQ(OutJson()["status"], "RUNNING");
}

// status --watch: a report per change until every experiment finished.
class WatchTest : public CommandsTest {
 protected:
  WatchTest()
      : CommandsTest([this](const Json& req) -> std::vector<Frames> {
          const int poll = ++polls_;
          Json fields = StatusFields();
          // Polls 1 and 2 the same, 3 a trial further, 4 finished.
          if (poll >= 3) fields["trials"][1]["iteration"] = 8;
          if (poll >= 4) fields["experiments"][0] = Experiment(/*finished=*/true);
          return {ReplyFrames(OkReply(req, fields))};
        }) {}
  std::atomic<int> polls_{0};
};

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_F(WatchTest, PlainOutputPrintsEachChangeAndEndsWhenFinished) {
  StatusOptions options;
  options.watch = true;
  options.interval_s = 0.01;
  ASSERT_EQ(RunStatus(Ctx(), "e0001", options), kExitOk) << err_.str();
  EXPECT_EQ(polls_.load(), 4);
  const std::string text = out_.str();
  EXPECT_EQ(Count(text, "== Status =="), 3u) << text;  // poll 2 changed nothing
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << "no terminal codes when not a terminal";
  EXPECT_NE(text.find("Experiment e0001 (mnist): TERMINATED"), std::string::npos) << text;
  EXPECT_NE(text.find("Progress: [##############################] 100% \u00b7 3/3 trials done"),
            std::string::npos)
      << text;
}

TEST_F(WatchTest, TerminalRedrawsInPlace) {
  StatusOptions options;
  options.watch = true;
  options.interval_s = 0.01;
  CommandContext ctx = Ctx();
  ctx.out_is_terminal = true;
  ASSERT_EQ(RunStatus(ctx, "", options), kExitOk) << err_.str();
  const std::string text = out_.str();
  EXPECT_EQ(text.rfind("\x1b[2J", 0), 0u) << "the screen is cleared once";
  EXPECT_EQ(Count(text, "\x1b[H"), 4u) << "one frame per poll";
  EXPECT_NE(text.find("ztune status \u00b7 every 0.01 s"), std::string::npos) << text;
  // The last frame says so and the experiment is done.
  const std::string last = text.substr(text.rfind("\x1b[H"));
  EXPECT_NE(last.find("\u00b7 finished"), std::string::npos) << last;
  EXPECT_NE(last.find("TERMINATED \u2014 3 trials"), std::string::npos) << last;
}

// The head answers nothing twice (restarting, say), then again.
TEST(WatchUnreachableTest, AnUnreachableHeadIsShownAndWaitedFor) {
  std::atomic<int> polls{0};
  FakeHead head([&](const Json& req) -> std::vector<Frames> {
    if (++polls <= 2) return {};
    Json fields = StatusFields();
    fields["experiments"][0] = Experiment(/*finished=*/true);
    return {ReplyFrames(OkReply(req, fields))};
  });
  HeadClient client(ClientOptions(head.endpoint(), 100));
  std::ostringstream out, err;
  StatusOptions options;
  options.watch = true;
  options.interval_s = 0.01;
  ASSERT_EQ(RunStatus(CommandContext{client, out, err}, "e0001", options), kExitOk) << err.str();
  EXPECT_EQ(Count(err.str(), "(retrying)"), 1u) << err.str();  // once per distinct problem
  EXPECT_NE(err.str().find("no reply from head at " + head.endpoint()), std::string::npos)
      << err.str();
  EXPECT_NE(out.str().find("TERMINATED"), std::string::npos) << out.str();
}

TEST_F(ErrorHeadTest, WatchEndsOnAHeadError) {
  StatusOptions options;
  options.watch = true;
  options.interval_s = 0.01;
  EXPECT_EQ(RunStatus(Ctx(), "e0042", options), kExitHeadError);
  EXPECT_EQ(err_.str(), "error: NotFound: no experiment e0042\n");
}

TEST_F(WaitTest, TerminalShowsOneBarRedrawnInPlace) {
  WaitOptions options;
  options.interval_ms = 10;
  CommandContext ctx = Ctx();
  ctx.err_is_terminal = true;
  ASSERT_EQ(RunWait(ctx, "e0001", options, SteadyClock()), kExitOk);
  const std::string err = err_.str();
  EXPECT_EQ(Count(err, "\re0001 ["), 3u) << err;
  EXPECT_EQ(Count(err, "\n"), 1u) << "one line, ended once: " << err;
  EXPECT_NE(err.find("\re0001 [##########----------"), std::string::npos) << err;  // 1/3 done
  EXPECT_NE(err.find("100% \u00b7 3/3 trials done\x1b[K\n"), std::string::npos) << err;
  EXPECT_EQ(out_.str(),
            "Experiment e0001 (mnist): TERMINATED \u2014 3 trials: 2 TERMINATED, 1 ERROR\n"
            "Best trial: e0001_00000 loss=0.00121 (iteration 50)\n");
}

TEST(DashboardUrlForTest, AWildcardHostBecomesTheHostTheClientReachedTheHeadAt) {
  EXPECT_EQ(DashboardUrlFor("https://0.0.0.0:8265/login?token=t", "tcp://head.example.org:5556"),
            "https://head.example.org:8265/login?token=t");
  EXPECT_EQ(DashboardUrlFor("https://[::]:8265/login?token=t", "tcp://[fd00::1]:5556"),
            "https://[fd00::1]:8265/login?token=t");
  EXPECT_EQ(DashboardUrlFor("https://0.0.0.0:8265/", "tcp://127.0.0.1:5556"),
            "https://127.0.0.1:8265/");
  // A named host stays; so does a wildcard when the client's endpoint names none.
  EXPECT_EQ(DashboardUrlFor("https://10.0.0.1:8265/", "tcp://head:5556"), "https://10.0.0.1:8265/");
  EXPECT_EQ(DashboardUrlFor("http://127.0.0.1:8265/", "tcp://head:5556"), "http://127.0.0.1:8265/");
  EXPECT_EQ(DashboardUrlFor("https://0.0.0.0:8265/", "ipc:///tmp/head"), "https://0.0.0.0:8265/");
  EXPECT_EQ(DashboardUrlFor("https://0.0.0.0:8265/", "tcp://*:5556"), "https://0.0.0.0:8265/");
  EXPECT_EQ(DashboardUrlFor("not a url", "tcp://head:5556"), "not a url");
}

}  // namespace
}  // namespace ztune::client
