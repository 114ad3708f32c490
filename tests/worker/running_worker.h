// Test helper: a WorkerRuntime running on its own thread, shut down on
// destruction. `fill` registers the trainables it hosts (none: the built-ins).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "common/clock.h"
#include "worker/builtin_trainables.h"
#include "worker/trainable_registry.h"
#include "worker/worker_runtime.h"

namespace ztune::worker {

class RunningWorker {
 public:
  RunningWorker(zmq::context_t& context, WorkerOptions options,
                const std::function<void(TrainableRegistry&)>& fill = {}) {
    if (fill) {
      fill(registry_);
    } else {
      RegisterBuiltinTrainables(registry_);
    }
    runtime_ = std::make_unique<WorkerRuntime>(context, registry_, std::move(options), clock_);
    thread_ = std::thread([this] { status_ = runtime_->Run(); });
  }
  ~RunningWorker() { Stop().IgnoreError(); }
  RunningWorker(const RunningWorker&) = delete;
  RunningWorker& operator=(const RunningWorker&) = delete;

  Status Stop() {
    if (thread_.joinable()) {
      runtime_->RequestShutdown();
      thread_.join();
    }
    return status_;
  }
  const std::string& id() const { return runtime_->worker_id(); }

 private:
  TrainableRegistry registry_;
  SteadyClock clock_;
  std::unique_ptr<WorkerRuntime> runtime_;
  std::thread thread_;
  Status status_;
};

}  // namespace ztune::worker
