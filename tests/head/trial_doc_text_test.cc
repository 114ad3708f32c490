// TrialDocText writes what TrialDoc's DOM dumps, byte for byte; HandleText's
// `trials` and `status` replies are Handle's, as parsed objects.
#include "head/trial_doc_text.h"

#include <gtest/gtest.h>

#include "head/client_service.h"
#include "tests/head/trial_runner_fixture.h"

namespace ztune::head {
namespace {

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

class TrialDocTextTest : public TrialRunnerTest {
 protected:
  // Every trial of every experiment: its text against its DOM's dump.
  void ExpectTextIsTheDomsDump(int* checked) {
    ClientService clients(*runner_);
    for (const auto& [id, e] : runner_->experiments()) {
      for (const TrialId& tid : e.trial_ids) {
        const Trial* t = runner_->FindTrial(tid);
        std::string text;
        TrialDocText(*runner_, text).Append(*t);
        EXPECT_EQ(text, Dump(clients.TrialDoc(*t))) << tid;
        ++*checked;
      }
    }
  }

  // HandleText's reply parsed is Handle's.
  void ExpectSameReply(const Json& request) {
    ClientService clients(*runner_);
    const Json dom = clients.Handle(request, ClientCaller::Anonymous());
    const std::string text = clients.HandleText(request, ClientCaller::Anonymous());
    Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(parsed.is_discarded()) << text.substr(0, 300);
    EXPECT_EQ(parsed, dom) << request.dump();
  }
};

// Trials in many states: pending, running with a worker, terminated with
// checkpoints, failed with an error log and restored, errored for good,
// strings that need escaping in the config, a trial from an experiment with
// other resources; before any result and after.
TEST_F(TrialDocTextTest, TheTextIsTheDomsDumpForTrialsInEveryState) {
  fleet_->Register("w1", 2);
  const std::string quoted = Submit(R"({"trainable": "quadratic", "num_samples": 2,
      "param_space": {"name": {"grid_search": ["plain", "qu\"ote\\ tab\t é ☃"]},
                      "lr": {"uniform": [0.01, 0.1]}},
      "stop": {"training_iteration": 6}, "checkpoint": {"frequency": 2, "num_to_keep": 2},
      "max_failures": 2, "metric": "loss", "mode": "min"})");
  const std::string other = Submit(R"({"trainable": "quadratic", "num_samples": 3,
      "resources": {"bundles": [{"CPU": 2}]},
      "stop": {"training_iteration": 40}, "max_failures": 0})");
  int checked = 0;
  ExpectTextIsTheDomsDump(&checked);  // nothing has run: PENDING, no result
  ASSERT_GT(checked, 0);
  const Experiment* e = runner_->FindExperiment(quoted);
  fleet_->FailAt(e->trial_ids[0], 3);  // retried from its checkpoint at 2
  const Experiment* o = runner_->FindExperiment(other);
  fleet_->FailAt(o->trial_ids[0], 2);  // max_failures 0: ERROR
  for (int i = 0; i < 6; ++i) {
    fleet_->Turn();
    fleet_->Heartbeat();
  }
  ExpectTextIsTheDomsDump(&checked);  // mid-run: RUNNING on w1, results
  RunToEnd(quoted);
  ExpectTextIsTheDomsDump(&checked);
  const Trial* retried = runner_->FindTrial(e->trial_ids[0]);
  EXPECT_EQ(retried->num_failures, 1);
  EXPECT_FALSE(retried->error_log.empty());
  EXPECT_FALSE(retried->checkpoints.empty());
  EXPECT_EQ(runner_->FindTrial(o->trial_ids[0])->status, TrialStatus::kError);
}

TEST_F(TrialDocTextTest, TrialsAndStatusRepliesAreHandlesWhateverThePage) {
  fleet_->Register("w1", 1);
  const std::string a = Submit(R"({"trainable": "quadratic", "num_samples": 5,
      "stop": {"training_iteration": 3}, "metric": "loss", "mode": "min"})");
  const std::string b = Submit(R"({"trainable": "quadratic", "num_samples": 4,
      "stop": {"training_iteration": 3}})");
  for (int i = 0; i < 8; ++i) {
    fleet_->Turn();
    fleet_->Heartbeat();
  }
  for (const std::string& exp : {a, b}) {
    for (const Json& page : {Json{{"offset", 0}, {"limit", 2}}, Json{{"offset", 3}},
                             Json{{"offset", 100}}, Json::object()}) {
      Json trials{{"op", "trials"}, {"experiment_id", exp}, {"rid", 7}};
      Json status{{"op", "status"}, {"experiment_id", exp}};
      trials.update(page);
      status.update(page);
      ExpectSameReply(trials);
      ExpectSameReply(status);
    }
  }
  // Every experiment's status, a page across the two experiments.
  ExpectSameReply(Json{{"op", "status"}, {"offset", 3}, {"limit", 4}, {"rid", "r"}});
  ExpectSameReply(Json{{"op", "status"}});
  // Refused requests are Handle's errors.
  ExpectSameReply(Json{{"op", "trials"}, {"experiment_id", "nope"}});
  ExpectSameReply(Json{{"op", "trials"}, {"experiment_id", a}, {"offset", -1}});
  ExpectSameReply(Json{{"op", "status"}, {"experiment_id", 3}});
  ExpectSameReply(Json{{"op", "trials"}});
  ExpectSameReply(Json{{"op", "experiments"}});
}

}  // namespace
}  // namespace ztune::head
