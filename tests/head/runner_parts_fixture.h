// RunnerPartsTest: the real parts of a TrialRunner wired together without the
// runner (a fake clock, a recording command sink, a FIFO scheduler), as the
// base of the unit tests of ActorManager, TrialLifecycle and TrialRecovery.
// Test-thread only.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "head/actor_manager.h"
#include "head/fifo_scheduler.h"
#include "head/recovery_waits.h"
#include "head/searcher.h"
#include "head/trial_lifecycle.h"
#include "head/worker_registry.h"
#include "tests/fakes/recording_command_sink.h"

namespace ztune::head {

class RunnerPartsTest : public ::testing::Test {
 protected:
  // `strict_invariants`: an illegal change aborts instead of being refused.
  explicit RunnerPartsTest(bool strict_invariants = false)
      : lifecycle_(LifecycleParts(), strict_invariants) {
    executor_.SetEpoch(1);
  }

  TrialLifecycle::Parts LifecycleParts() {
    return TrialLifecycle::Parts{book_,  executor_, actors_, scheduler_,
                                 waits_, searcher_, groups_, batch_};
  }

  // Registers worker `id` hosting `trainables` with `cpus` CPUs, in the
  // registry and the ledger (as the runner does on REGISTER).
  // `exports`: what it declares its trainables export (REGISTER).
  void AddWorker(const std::string& id, std::vector<std::string> trainables, double cpus = 4,
                 std::vector<protocol::TrainableExports> exports = {}) {
    protocol::Register r;
    r.worker_id = id;
    r.incarnation = 1;
    r.resources = {{"CPU", cpus}};
    r.trainables = std::move(trainables);
    r.export_formats = std::move(exports);
    ASSERT_TRUE(WorkerRegistry::CheckOffer(r).ok());
    ASSERT_TRUE(registry_.Register(r));
    ledger_.AddWorker(WorkerId(id), ResourceSet::FromDoubles(r.resources), r.gpu_ids);
    groups_.NotifyCapacityChanged();
  }

  // The STOPs sent since the last take of the sink, as "worker/trial/attempt".
  std::set<std::string> Stops() {
    std::set<std::string> out;
    for (const auto& s : sink_.TakeAll()) {
      if (const auto* stop = std::get_if<protocol::Stop>(&s.message.body)) {
        out.insert(s.worker_id.str() + "/" + stop->trial_id + "/" + std::to_string(stop->attempt));
      }
    }
    return out;
  }

  FakeClock clock_;
  WorkerRegistry registry_{clock_, /*expiry_ms=*/10'000};
  ResourceLedger ledger_;
  PlacementGroupManager groups_{ledger_, clock_, PlacementGroupOptions{16, 0}};
  testing::RecordingCommandSink sink_;
  Executor executor_{sink_, clock_};
  TrialBook book_;
  FifoScheduler scheduler_;
  ActorManager actors_{executor_, groups_, book_, scheduler_, /*force_cleanup_ms=*/600'000};
  RecoveryWaits waits_;
  Searcher searcher_;
  storage::WriteBatch batch_;
  TrialLifecycle lifecycle_;
};

}  // namespace ztune::head
