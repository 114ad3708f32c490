// Test helper: drives one ActorRunner without sockets, the way WorkerRuntime
// does (enqueue a head command, wait for its RunnerEvent): on a runner thread
// of its own, or, for an inline actor (ActorRunner::runs_inline), on the test
// thread. Mode::kThread puts an inline actor on a thread too. Test-thread only.
#pragma once

#include <unistd.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/fakes/temp_dir.h"
#include "worker/actor_runner.h"
#include "worker/trainable_registry.h"

namespace ztune::worker {

using testing::TempDir;

class ActorHarness {
 public:
  enum class Mode { kAsWorker, kThread };

  ActorHarness(const std::string& trainable, const std::string& trial_id, uint64_t attempt,
               Json config, const std::string& work_dir, Mode mode = Mode::kAsWorker)
      : events_(std::make_shared<EventQueue>()),
        key_trial_(trial_id),
        key_attempt_(attempt),
        mode_(mode) {
    TrainableRegistry registry;
    RegisterBuiltinTrainables(registry);
    auto t = registry.Create(trainable);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    Start(trainable, std::move(t).value(), trial_id, attempt, std::move(config), work_dir);
  }

  // Hosts a custom trainable instance under `name`.
  ActorHarness(const std::string& name, std::unique_ptr<Trainable> trainable,
               const std::string& trial_id, uint64_t attempt, Json config,
               const std::string& work_dir)
      : events_(std::make_shared<EventQueue>()), key_trial_(trial_id), key_attempt_(attempt) {
    Start(name, std::move(trainable), trial_id, attempt, std::move(config), work_dir);
  }

  void Start(const std::string& trainable, std::unique_ptr<Trainable> instance,
             const std::string& trial_id, uint64_t attempt, Json config,
             const std::string& work_dir) {
    protocol::CreateActor create;
    create.rid = 1;
    create.trial_id = trial_id;
    create.attempt = attempt;
    create.trainable = trainable;
    create.config = std::move(config);
    HostInfo host{"test-worker", "test-host", 4242, work_dir};
    runner_ = std::make_shared<ActorRunner>(++serial_, create, std::move(instance), host, events_);
    inline_ = mode_ == Mode::kAsWorker && runner_->runs_inline();
    if (!inline_) {
      auto runner = runner_;
      thread_ = std::thread([runner] { runner->Run(); });
    }
    setup_ = Next();
  }

  ~ActorHarness() {
    if (!thread_.joinable() && !inline_) return;
    if (!exited_) {
      protocol::Stop stop;
      stop.rid = 999;
      stop.trial_id = key_trial_;
      stop.attempt = key_attempt_;
      Call(stop);
    }
    if (thread_.joinable()) thread_.join();
  }

  // Whether the actor runs on the test thread.
  bool runs_on_caller() const { return inline_; }

  // Setup's event.
  const RunnerEvent& setup() const { return setup_; }

  // The key the harness addresses commands to (follows a successful RESET).
  void SetKey(const std::string& trial_id, uint64_t attempt) {
    key_trial_ = trial_id;
    key_attempt_ = attempt;
  }

  // Defaults to a generous time bound so `buffer_length` alone limits the batch.
  RunnerEvent Train(int64_t buffer_length = 1, double buffer_time_s = 60) {
    protocol::Train t;
    t.rid = ++rid_;
    t.trial_id = key_trial_;
    t.attempt = key_attempt_;
    t.buffer_length = buffer_length;
    t.buffer_time_s = buffer_time_s;
    return Call(t);
  }
  RunnerEvent Save() {
    protocol::Save s;
    s.rid = ++rid_;
    s.trial_id = key_trial_;
    s.attempt = key_attempt_;
    return Call(s);
  }
  RunnerEvent Restore(const std::string& envelope) {
    protocol::Restore r;
    r.rid = ++rid_;
    r.trial_id = key_trial_;
    r.attempt = key_attempt_;
    return Call(r, envelope);
  }

  template <class Body>
  RunnerEvent Call(const Body& body, std::string payload = {}) {
    runner_->Enqueue(protocol::Message{body, std::move(payload)});
    RunnerEvent e = Next();
    if (e.exited) exited_ = true;
    return e;
  }

  // Waits (up to 10 s) for the next event.
  RunnerEvent Next() {
    if (inline_) {
      for (auto& e : runner_->RunQueuedInline()) pending_.push_back(std::move(e));
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      for (auto& e : events_->Drain()) pending_.push_back(std::move(e));
      if (!pending_.empty()) {
        RunnerEvent e = std::move(pending_.front());
        pending_.pop_front();
        if (e.exited) exited_ = true;
        return e;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ADD_FAILURE() << "no runner event within 10 s";
    return RunnerEvent{};
  }

  ActorRunner& runner() { return *runner_; }

 private:
  static inline uint64_t serial_ = 0;
  std::shared_ptr<EventQueue> events_;
  std::string key_trial_;
  uint64_t key_attempt_ = 0;
  Mode mode_ = Mode::kAsWorker;
  bool inline_ = false;
  std::shared_ptr<ActorRunner> runner_;
  std::thread thread_;
  std::deque<RunnerEvent> pending_;
  RunnerEvent setup_;
  bool exited_ = false;
  uint64_t rid_ = 100;
};

}  // namespace ztune::worker
