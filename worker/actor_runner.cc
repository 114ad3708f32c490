#include "worker/actor_runner.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "common/check.h"
#include "common/protocol/result_fields.h"
#include "common/checkpoint/checkpoint_envelope.h"

namespace ztune::worker {
using checkpoint::CheckpointEnvelope;
namespace {

std::atomic<int> g_running_threads{0};

// The trainable seam: user code may throw; nothing escapes into the worker.
template <class F>
auto Guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return Status::Internal(std::string("exception: ") + e.what());
  } catch (...) {
    return Status::Internal("unknown exception");
  }
}

std::string FormatDate(std::time_t t) {
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d_%H-%M-%S", &tm);
  return buf;
}

bool Truthy(const Json& result, const char* key) {
  auto it = result.find(key);
  if (it == result.end()) return false;
  if (it->is_boolean()) return it->get<bool>();
  if (it->is_number()) return it->get<double>() != 0;
  return false;
}

// A count as a result's value: an integer when it is one (timesteps are
// usually integral).
decltype(protocol::AutoField::value) CountValue(double v) {
  if (std::fabs(v) < 9.0e15 && v == std::floor(v)) return static_cast<int64_t>(v);
  return v;
}

CommandKind KindOf(const protocol::Body& body) {
  if (std::holds_alternative<protocol::Train>(body)) return CommandKind::kTrain;
  if (std::holds_alternative<protocol::Save>(body)) return CommandKind::kSave;
  if (std::holds_alternative<protocol::Restore>(body)) return CommandKind::kRestore;
  if (std::holds_alternative<protocol::Reset>(body)) return CommandKind::kReset;
  if (std::holds_alternative<protocol::Stop>(body)) return CommandKind::kStop;
  if (std::holds_alternative<protocol::Export>(body)) return CommandKind::kExport;
  return CommandKind::kSetup;
}

}  // namespace

std::string ActorKey::ToString() const {
  return "trial " + trial_id + " attempt " + std::to_string(attempt);
}

// ---------------- EventQueue ----------------

EventQueue::EventQueue() {
  fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd_ < 0) spdlog::error("eventfd: {}", std::strerror(errno));
}

EventQueue::~EventQueue() {
  if (fd_ >= 0) close(fd_);
}

void EventQueue::Push(RunnerEvent event) {
  std::lock_guard<std::mutex> lock(mu_);
  // The fd is readable from the push that made the queue non-empty until the
  // Drain that empties it (both under mu_): only that push needs the write.
  // With many actors a busy control thread finds several events per wake-up:
  // at one result per batch this took a worker's write(2) calls from 45.7k
  // to 16.6k per 2 s (docs/benchmarks.md).
  const bool was_empty = events_.empty();
  events_.push_back(std::move(event));
  if (was_empty) Wake();
}

std::deque<RunnerEvent> EventQueue::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t counter = 0;
  // EAGAIN (nothing to clear) is fine: the counter is already zero.
  ssize_t n = read(fd_, &counter, sizeof(counter));
  (void)n;
  std::deque<RunnerEvent> out;
  out.swap(events_);
  return out;
}

void EventQueue::Wake() const {
  uint64_t one = 1;
  ssize_t n = write(fd_, &one, sizeof(one));
  (void)n;  // EAGAIN only when the counter is saturated: already readable.
}

// ---------------- ActorRunner ----------------

ActorRunner::ActorRunner(uint64_t serial, const protocol::CreateActor& create,
                         std::unique_ptr<Trainable> trainable, HostInfo host,
                         std::shared_ptr<EventQueue> events)
    : serial_(serial),
      host_(std::move(host)),
      trainable_name_(create.trainable),
      events_(std::move(events)),
      key_{create.trial_id, create.attempt},
      config_(create.config.is_null() ? Json::object() : create.config),
      gpu_ids_(create.gpu_ids),
      resources_(create.resources),
      trainable_(std::move(trainable)),
      runs_inline_(trainable_ != nullptr && trainable_->RunsInline(config_)) {
  log_ = std::make_shared<TrialLog>(TrialDir(host_.work_dir, key_.trial_id));
  protocol::Message setup{create, {}};
  queue_.push_back(std::move(setup));
}

ActorRunner::~ActorRunner() = default;

int ActorRunner::RunningThreads() { return g_running_threads.load(); }

void ActorRunner::Enqueue(protocol::Message command) {
  bool is_stop = std::holds_alternative<protocol::Stop>(command.body);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (is_stop) stops_queued_.fetch_add(1);
    queue_.push_back(std::move(command));
  }
  cv_.notify_one();
}

void ActorRunner::Abandon() {
  abandoned_.store(true);
  cv_.notify_one();
  // This is the runner thread of an inline actor: release the trainable now,
  // as Run() does for an abandoned threaded one.
  if (runs_inline_) ReleaseAbandonedTrainable();
}

void ActorRunner::ReleaseAbandonedTrainable() {
  if (trainable_ != nullptr && setup_done_) {
    Guarded([&]() -> Status {
      trainable_->Cleanup();
      return Status::Ok();
    }).IgnoreError();
  }
  trainable_.reset();
}

std::shared_ptr<TrialLog> ActorRunner::CurrentLog() const {
  std::lock_guard<std::mutex> lock(log_mu_);
  return log_;
}

void ActorRunner::Post(RunnerEvent event) {
  if (abandoned_.load()) return;  // a killed actor's output is never sent
  events_->Push(std::move(event));
}

RunnerEvent ActorRunner::ExecuteAndStamp(protocol::Message& command) {
  RunnerEvent event = Execute(command);
  // Destroy user state here, not on the control thread that joins us.
  if (event.exited) {
    trainable_.reset();
    exited_ = true;
  }
  event.actor_serial = serial_;
  return event;
}

std::vector<RunnerEvent> ActorRunner::RunQueuedInline() {
  CHECK(runs_inline_);
  std::vector<RunnerEvent> events;
  // The queue is only touched by this (the control) thread for an inline
  // actor; the lock keeps Enqueue's invariants uniform.
  while (!abandoned_.load() && !exited_) {
    protocol::Message command;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) break;
      command = std::move(queue_.front());
      queue_.pop_front();
      if (std::holds_alternative<protocol::Stop>(command.body)) stops_queued_.fetch_sub(1);
    }
    events.push_back(ExecuteAndStamp(command));
  }
  return events;
}

void ActorRunner::Run() {
  g_running_threads.fetch_add(1);
  while (true) {
    protocol::Message command;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || abandoned_.load(); });
      if (abandoned_.load()) break;
      command = std::move(queue_.front());
      queue_.pop_front();
      if (std::holds_alternative<protocol::Stop>(command.body)) stops_queued_.fetch_sub(1);
    }
    RunnerEvent event = ExecuteAndStamp(command);
    const bool exit = event.exited;
    Post(std::move(event));
    if (exit) {
      g_running_threads.fetch_sub(1);
      return;
    }
  }
  // Abandoned: nothing is reported.
  ReleaseAbandonedTrainable();
  g_running_threads.fetch_sub(1);
}

RunnerEvent ActorRunner::Execute(protocol::Message& command) {
  return std::visit(
      [&](auto& body) -> RunnerEvent {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, protocol::CreateActor>) {
          return DoSetup(body.rid);
        } else if constexpr (protocol::kIsActorCommand<T>) {
          ActorKey key{body.trial_id, body.attempt};
          // Fencing: a command queued for the key this actor had before a RESET.
          if (key != key_) return NoActor(KindOf(command.body), body.rid, key);
          if constexpr (std::is_same_v<T, protocol::Train>) return DoTrain(body);
          if constexpr (std::is_same_v<T, protocol::Save>) return DoSave(body);
          if constexpr (std::is_same_v<T, protocol::Restore>) {
            return DoRestore(body, command.payload);
          }
          if constexpr (std::is_same_v<T, protocol::Reset>) return DoReset(body);
          if constexpr (std::is_same_v<T, protocol::Stop>) return DoStop(body);
          if constexpr (std::is_same_v<T, protocol::Export>) return DoExport(body);
        } else {
          // The control thread only enqueues actor commands.
          RunnerEvent e;
          e.ok = false;
          e.error = "not an actor command";
          return e;
        }
      },
      command.body);
}

RunnerEvent ActorRunner::NoActor(CommandKind kind, uint64_t rid, const ActorKey& key) const {
  RunnerEvent e;
  e.kind = kind;
  e.rid = rid;
  e.key = key;
  e.ok = false;
  e.error = "no actor for " + key.ToString() + " on worker " + host_.worker_id;
  e.iteration = iteration_;
  return e;
}

TrialContext ActorRunner::MakeContext() const {
  TrialContext ctx;
  ctx.trial_id = key_.trial_id;
  ctx.attempt = key_.attempt;
  ctx.worker_id = host_.worker_id;
  ctx.iteration = iteration_;
  ctx.gpu_ids = gpu_ids_;
  ctx.resources = resources_;
  ctx.restored = restored_;
  std::shared_ptr<TrialLog> log = CurrentLog();
  ctx.logdir = log->dir();
  ctx.log_sink = log.get();  // the runner thread alone swaps log_, so this stays valid
  ctx.stop_flag = &abandoned_;
  return ctx;
}

const TrialContext& ActorRunner::Context() {
  if (!context_valid_) {
    context_ = MakeContext();
    context_valid_ = true;
  }
  context_.iteration = iteration_;
  context_.restored = restored_;
  return context_;
}

RunnerEvent ActorRunner::NewEvent(CommandKind kind, uint64_t rid) const {
  RunnerEvent e;
  e.kind = kind;
  e.rid = rid;
  e.key = key_;
  return e;
}

RunnerEvent ActorRunner::DoSetup(uint64_t rid) {
  RunnerEvent e = NewEvent(CommandKind::kSetup, rid);
  TrialContext ctx = MakeContext();
  Status s = Guarded([&] { return trainable_->Setup(config_, ctx); });
  if (!s.ok()) {
    e.ok = false;
    e.error = "setup of trainable '" + trainable_name_ + "' failed: " + s.message();
    e.exited = true;
    ctx.Log("Failure: " + e.error);
    return e;
  }
  setup_done_ = true;
  ctx.Log("created actor for " + key_.ToString() + " (trainable " + trainable_name_ +
          ") on worker " + host_.worker_id);
  return e;
}

protocol::RawResult ActorRunner::FillResult(const Json& result, double measured_s) {
  using protocol::AutoField;
  // Ray's Trainable.train(): counters first, then setdefault / update.
  double this_iter = measured_s;
  if (auto it = result.find("time_this_iter_s"); it != result.end() && it->is_number()) {
    this_iter = it->get<double>();
  }
  iteration_ += 1;
  iterations_since_restore_ += 1;
  time_total_s_ += this_iter;
  time_since_restore_ += this_iter;
  if (auto it = result.find("timesteps_this_iter"); it != result.end() && it->is_number()) {
    timesteps_total_ = timesteps_total_.value_or(0) + it->get<double>();
  }
  std::time_t now = std::time(nullptr);
  if (now != date_of_) {  // formatted once a second, not per result
    date_of_ = now;
    date_ = FormatDate(now);
  }
  // Sorted by key, as PackWithAutoFields needs. training_iteration is
  // replaced (Ray uses setdefault): the head keys results and deduplicates
  // replays by it, so a user value must not win.
  std::array<AutoField, 13> fields;
  size_t n = 0;
  auto add = [&](AutoField f) { fields[n++] = f; };
  add({"date", std::string_view(date_)});
  add({"done", false, AutoField::Rule::kSetDefault});
  add({"hostname", std::string_view(host_.hostname)});
  add({"iterations_since_restore", iterations_since_restore_});
  if (auto it = result.find("mean_loss");
      it != result.end() && it->is_number() && it->get<double>() != 0) {
    add({"neg_mean_loss", -it->get<double>(), AutoField::Rule::kSetDefault});
  }
  add({"pid", host_.pid});
  add({"time_since_restore", time_since_restore_});
  add({"time_this_iter_s", this_iter});
  add({"time_total_s", time_total_s_});
  add({"timestamp", static_cast<int64_t>(now)});
  if (timesteps_total_.has_value()) {
    add({"timesteps_total", CountValue(*timesteps_total_), AutoField::Rule::kSetDefault});
  }
  add({"training_iteration", iteration_});
  add({"trial_id", std::string_view(key_.trial_id)});
  return protocol::PackWithAutoFields(result, std::span<const AutoField>(fields.data(), n));
}

RunnerEvent ActorRunner::DoTrain(const protocol::Train& cmd) {
  RunnerEvent e = NewEvent(CommandKind::kTrain, cmd.rid);
  const int64_t max_results = std::max<int64_t>(1, cmd.buffer_length);
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    const TrialContext& ctx = Context();
    const int64_t iteration = iteration_ + 1;
    auto t0 = std::chrono::steady_clock::now();
    Result<Json> r = Guarded([&] { return trainable_->Step(ctx); });
    double measured = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (abandoned_.load()) break;  // nobody will read it
    if (r.ok() && !r->is_object()) {
      r = Status::InvalidArgument(std::string("result must be a JSON object, got ") +
                                  r->type_name());
    }
    if (!r.ok()) {
      e.ok = false;
      e.error = "step of iteration " + std::to_string(iteration) + " failed: " + r.status().message();
      ctx.Log("Failure: " + e.error);
      break;
    }
    // The defaults FillResult adds (done: false) are not truthy.
    const bool stop_early = Truthy(*r, "done") || Truthy(*r, "should_checkpoint");
    e.results.push_back(FillResult(*r, measured));
    if (stop_early || static_cast<int64_t>(e.results.size()) >= max_results) break;
    // Ray's train_buffered: keep going while the buffer time lasts, so
    // buffer_time_s <= 0 yields exactly one result.
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed >= cmd.buffer_time_s) break;
    if (stops_queued_.load() > 0) break;  // a STOP waits behind us: hand back what we have
  }
  e.iteration = iteration_;
  return e;
}

RunnerEvent ActorRunner::DoSave(const protocol::Save& cmd) {
  RunnerEvent e = NewEvent(CommandKind::kSave, cmd.rid);
  e.iteration = iteration_;
  TrialContext ctx = MakeContext();
  Result<std::string> bytes = Guarded([&] { return trainable_->Save(ctx); });
  if (!bytes.ok()) {
    e.ok = false;
    e.error = "save at iteration " + std::to_string(iteration_) + " failed: " +
              bytes.status().message();
    ctx.Log("Failure: " + e.error);
    return e;
  }
  CheckpointEnvelope env;
  env.trainable = trainable_name_;
  env.trial_id = key_.trial_id;
  env.iteration = iteration_;
  env.time_total_s = time_total_s_;
  env.timesteps_total = timesteps_total_;
  env.data = std::move(bytes).value();
  std::unique_ptr<protocol::PayloadSource> envelope =
      checkpoint::MakeEnvelopeSource(std::move(env));
  const uint64_t size = envelope->size();
  if (size > protocol::kInlinePayloadBytes) {
    e.large_payload = std::move(envelope);  // its checksum is computed as it is sent
  } else {
    CHECK(envelope->ReadAt(0, size, e.payload).ok());  // in memory: cannot fail
  }
  e.data = Json{{"iteration", iteration_}, {"bytes", size}, {"storage", cmd.storage}};
  ctx.Log("saved checkpoint at iteration " + std::to_string(iteration_) + " (" +
          std::to_string(size) + " bytes, " + cmd.storage + ")");
  return e;
}

RunnerEvent ActorRunner::DoRestore(const protocol::Restore& cmd, const std::string& payload) {
  RunnerEvent e = NewEvent(CommandKind::kRestore, cmd.rid);
  auto fail = [&](const std::string& why) {
    e.ok = false;
    e.error = "restore failed: " + why;
    e.iteration = iteration_;
    CurrentLog()->Write("Failure: " + e.error);
    return std::move(e);  // the event is not used after a failure
  };
  if (payload.empty()) return fail("RESTORE carries no checkpoint payload");
  // A view: the data stays in `payload` (one copy of a large checkpoint).
  Result<checkpoint::CheckpointEnvelopeView> env = checkpoint::DecodeEnvelopeView(payload);
  if (!env.ok()) return fail(env.status().message());
  if (env->trainable != trainable_name_) {
    return fail("checkpoint is of trainable '" + env->trainable + "', this actor runs '" +
                trainable_name_ + "'");
  }
  // Counters as of the checkpoint; rolled back if the trainable rejects it.
  const int64_t old_iteration = iteration_;
  const double old_total = time_total_s_;
  const std::optional<double> old_timesteps = timesteps_total_;
  const bool old_restored = restored_;
  iteration_ = env->iteration;
  time_total_s_ = env->time_total_s;
  timesteps_total_ = env->timesteps_total;
  restored_ = true;
  TrialContext ctx = MakeContext();
  Status s = Guarded([&] { return trainable_->Restore(env->data, ctx); });
  if (!s.ok()) {
    iteration_ = old_iteration;
    time_total_s_ = old_total;
    timesteps_total_ = old_timesteps;
    restored_ = old_restored;
    return fail(s.message());
  }
  iterations_since_restore_ = 0;
  time_since_restore_ = 0;
  e.iteration = iteration_;
  e.data = Json{{"iteration", iteration_}};
  ctx.Log("restored from checkpoint at iteration " + std::to_string(iteration_) +
          " (saved by trial " + env->trial_id + ")");
  return e;
}

RunnerEvent ActorRunner::DoReset(const protocol::Reset& cmd) {
  RunnerEvent e = NewEvent(CommandKind::kReset, cmd.rid);
  ActorKey new_key{cmd.new_trial_id, cmd.new_attempt};
  Json new_config = cmd.config.is_null() ? Json::object() : cmd.config;
  TrialContext ctx;
  ctx.trial_id = new_key.trial_id;
  ctx.attempt = new_key.attempt;
  ctx.worker_id = host_.worker_id;
  ctx.iteration = 0;
  ctx.logdir = TrialDir(host_.work_dir, new_key.trial_id);
  ctx.gpu_ids = gpu_ids_;
  ctx.resources = resources_;
  ctx.restored = false;
  ctx.stop_flag = &abandoned_;
  if (runs_inline_ && !trainable_->RunsInline(new_config)) {
    // This actor has no thread to move a blocking trainable to.
    CurrentLog()->Write("reset to " + new_key.ToString() +
                        " refused: its config may block, and this actor runs inline");
    e.iteration = iteration_;
    e.data = Json{{"reset", false}};
    return e;
  }
  bool reset = false;
  Status s = Guarded([&]() -> Status {
    reset = trainable_->ResetConfig(new_config, ctx);
    return Status::Ok();
  });
  if (!s.ok()) {
    CurrentLog()->Write("reset to " + new_key.ToString() + " raised " + s.message() +
                        "; actor unchanged");
    reset = false;
  }
  if (!reset) {
    e.iteration = iteration_;
    e.data = Json{{"reset", false}};
    return e;
  }
  CurrentLog()->Write("actor reset: now serves " + new_key.ToString());
  auto new_log = std::make_shared<TrialLog>(ctx.logdir);
  new_log->Write("actor reused from " + key_.ToString() + " (trainable " + trainable_name_ +
                 ") on worker " + host_.worker_id);
  {
    std::lock_guard<std::mutex> lock(log_mu_);
    log_ = std::move(new_log);
  }
  context_valid_ = false;  // a new trial, a new log
  key_ = new_key;
  config_ = std::move(new_config);
  iteration_ = 0;
  time_total_s_ = 0;
  timesteps_total_.reset();
  iterations_since_restore_ = 0;
  time_since_restore_ = 0;
  restored_ = false;
  e.iteration = 0;
  e.new_key = new_key;
  e.data = Json{{"reset", true}};
  return e;
}

RunnerEvent ActorRunner::DoStop(const protocol::Stop& cmd) {
  RunnerEvent e = NewEvent(CommandKind::kStop, cmd.rid);
  e.iteration = iteration_;
  e.exited = true;
  Status s = Guarded([&]() -> Status {
    trainable_->Cleanup();
    return Status::Ok();
  });
  if (!s.ok()) {
    // The actor is gone either way; the cleanup error is logged, not fatal.
    CurrentLog()->Write("Failure: cleanup raised " + s.message());
  }
  CurrentLog()->Write("stopped at iteration " + std::to_string(iteration_));
  return e;
}

RunnerEvent ActorRunner::DoExport(const protocol::Export& cmd) {
  RunnerEvent e = NewEvent(CommandKind::kExport, cmd.rid);
  e.iteration = iteration_;
  TrialContext ctx = MakeContext();
  Result<Json> r = Guarded([&] { return trainable_->ExportModel(cmd.formats, ctx); });
  if (!r.ok()) {
    e.ok = false;
    e.error = "export failed: " + r.status().message();
    return e;
  }
  e.data = Json{{"exports", std::move(r).value()}};
  return e;
}

}  // namespace ztune::worker
