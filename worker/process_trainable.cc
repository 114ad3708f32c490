#include "worker/process_trainable.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/json_parse.h"
#include "common/utf8.h"
#include "common/checkpoint/directory_archive.h"

extern char** environ;

namespace ztune::worker {
using checkpoint::PackDirectory;
using checkpoint::UnpackDirectory;
namespace fs = std::filesystem;
namespace {

constexpr int kProtocolVersion = 1;
constexpr size_t kQuoteBytes = 200;

std::string Quote(std::string_view text) {
  std::string s = Utf8OrReplaced(text.substr(0, kQuoteBytes));
  return text.size() > kQuoteBytes ? s + "..." : s;
}

std::string Now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string Absolute(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

std::string JoinIds(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

}  // namespace

ProcessTrainable::ProcessTrainable(ProcessTrainableSpec spec) : spec_(std::move(spec)) {}

ProcessTrainable::~ProcessTrainable() { EndProcess(false); }

std::vector<std::string> ProcessTrainable::ChildEnvironment(const TrialContext& ctx) const {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    vars[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
  }
  for (const auto& [k, v] : spec_.env) vars[k] = v;
  vars["ZTUNE_PROTOCOL"] = std::to_string(kProtocolVersion);
  vars["ZTUNE_COMMAND_FD"] = "3";
  vars["ZTUNE_REPLY_FD"] = "4";
  vars["ZTUNE_TRIAL_ID"] = ctx.trial_id;
  vars["ZTUNE_TRIAL_DIR"] = trial_dir_;
  vars["ZTUNE_WORKER_ID"] = ctx.worker_id;
  // Empty when the bundle has no GPU, as Ray sets it: a framework that sees
  // no variable takes every device of the machine.
  vars["CUDA_VISIBLE_DEVICES"] = JoinIds(ctx.gpu_ids);
  std::vector<std::string> env;
  env.reserve(vars.size());
  for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
  return env;
}

std::string ProcessTrainable::HeaderLine(const TrialContext& ctx, const std::string& note) const {
  return "==== ztune: trial " + ctx.trial_id + " attempt " + std::to_string(ctx.attempt) +
         " on worker " + ctx.worker_id + " (pid " +
         std::to_string(child_ != nullptr ? child_->pid() : 0) + note + ") at " + Now() + " ====";
}

Status ProcessTrainable::Setup(const Json& config, const TrialContext& ctx) {
  stop_flag_ = ctx.stop_flag;
  trial_dir_ = Absolute(ctx.logdir);
  std::error_code ec;
  fs::create_directories(trial_dir_, ec);
  if (ec)
    return Status::IOError("cannot create the trial directory " + trial_dir_ + ": " + ec.message());
  SpawnOptions options;
  options.argv = spec_.argv;
  options.env = ChildEnvironment(ctx);
  const char* path = std::getenv("PATH");
  options.path_env = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  options.cwd = spec_.cwd.empty() ? trial_dir_ : spec_.cwd;
  options.grace_ms = spec_.stop_grace_ms;
  auto child = ChildProcess::Spawn(options, group_);
  if (!child.ok()) return child.status();
  child_ = std::move(child).value();
  output_ = std::make_unique<TrialOutput>(child_->TakeStdoutFd(), child_->TakeStderrFd(),
                                          trial_dir_, ctx.attempt, HeaderLine(ctx, ""));
  channel_ = std::make_unique<LineChannel>(child_->command_fd(), child_->reply_fd());

  // The hello line: a program that does not speak the protocol (a wrong
  // argv, a script without ztune.run) is told apart from a slow setup.
  auto check = [&]() -> Status {
    if (stop_flag_ != nullptr && stop_flag_->load())
      return Status::Aborted("the worker gave up on this actor");
    if (child_->Poll()) return Status::Unavailable("the process ended");
    return Status::Ok();
  };
  auto hello_line = channel_->Read(check);
  if (!hello_line.ok()) return Broken("start-up (before its hello line)", hello_line.status());
  auto hello = ParseJson(*hello_line);
  if (!hello.ok() || !hello->is_object() || !hello->contains("protocol")) {
    return Broken("start-up", Status::InvalidArgument(
                                  "its first line must be the hello {\"protocol\": 1}, got '" +
                                  Quote(*hello_line) + "'"));
  }
  const Json& version = (*hello)["protocol"];
  if (!version.is_number_integer() || version.get<int64_t>() != kProtocolVersion) {
    return Broken("start-up", Status::InvalidArgument(
                                  "it speaks protocol " + Quote(version.dump()) +
                                  "; this worker speaks " + std::to_string(kProtocolVersion)));
  }
  if (auto sdk = hello->find("sdk"); sdk != hello->end() && sdk->is_string()) {
    ctx.Log("process " + std::to_string(child_->pid()) + " speaks protocol 1 (" +
            Quote(sdk->get<std::string>()) + ")");
  }
  Json command = {{"cmd", "setup"},
                  {"config", config},
                  {"trial_id", ctx.trial_id},
                  {"attempt", ctx.attempt},
                  {"trial_dir", trial_dir_}};
  auto reply = Call(command, "setup");
  return reply.ok() ? Status::Ok() : reply.status();
}

Result<Json> ProcessTrainable::Call(const Json& command, const std::string& what) {
  if (!broken_.empty()) return Status::Unavailable(broken_);
  if (channel_ == nullptr) return Status::FailedPrecondition("the process was not started");
  auto check = [&]() -> Status {
    if (stop_flag_ != nullptr && stop_flag_->load())
      return Status::Aborted("the worker gave up on this actor");
    if (child_->Poll()) return Status::Unavailable("the process ended");
    return Status::Ok();
  };
  if (channel_->Unasked() > 0) {
    return Broken(what,
                  Status::InvalidArgument(
                      "it wrote a line nobody asked for (a second reply to the last command?)"));
  }
  if (Status s = channel_->Write(command.dump(), check); !s.ok()) return Broken(what, s);
  auto line = channel_->Read(check);
  if (!line.ok()) return Broken(what, line.status());
  // What the child printed before it answered is in the trial's files by the
  // time the head hears the answer (a trial that ends has all its output).
  output_->Flush();
  auto reply = ParseJson(*line);
  if (!reply.ok()) {
    return Broken(what,
                  Status::InvalidArgument("its reply is not JSON (" + reply.status().message() +
                                          "): '" + Quote(*line) + "'"));
  }
  if (!reply->is_object()) {
    return Broken(
        what, Status::InvalidArgument("its reply is not a JSON object: '" + Quote(*line) + "'"));
  }
  auto ok = reply->find("ok");
  if (ok == reply->end() || !ok->is_boolean()) {
    return Broken(
        what, Status::InvalidArgument("its reply has no boolean \"ok\": '" + Quote(*line) + "'"));
  }
  if (!ok->get<bool>()) {
    auto error = reply->find("error");
    std::string message = error != reply->end() && error->is_string()
                              ? error->get<std::string>()
                              : std::string("(the reply gave no \"error\" string)");
    return Status::Internal(Utf8OrReplaced(message));
  }
  return std::move(reply).value();
}

Status ProcessTrainable::Broken(const std::string& what, const Status& cause) {
  std::string message;
  if (child_ != nullptr &&
      (cause.code() == StatusCode::kUnavailable || cause.code() == StatusCode::kIOError)) {
    // A pipe that closed usually means the process is exiting: give the
    // kernel a moment, so that the message names the exit status.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (!child_->Poll() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  if (child_ != nullptr && child_->Poll()) {
    message = "the process (pid " + std::to_string(child_->pid()) + ") " +
              child_->exit_status()->ToString() + " during " + what;
  } else if (cause.code() == StatusCode::kAborted) {
    message = "the process was stopped during " + what + ": " + cause.message();
  } else {
    message = "the process broke the protocol during " + what + ": " + cause.message();
  }
  if (output_ != nullptr) {
    output_->Flush();
    std::string tail = output_->StderrTail();
    if (!tail.empty()) message += "; last lines of its stderr:\n" + Utf8OrReplaced(tail);
  }
  broken_ = message;
  // A process that cannot take commands is of no more use: end it now, so
  // that its resources are free before the head stops the actor.
  EndProcess(false);
  return cause.code() == StatusCode::kAborted ? Status::Aborted(message)
                                              : Status::Internal(message);
}

Result<Json> ProcessTrainable::Step(const TrialContext& ctx) {
  const int64_t iteration = ctx.iteration + 1;
  auto reply = Call(Json{{"cmd", "step"}, {"iteration", iteration}},
                    "step of iteration " + std::to_string(iteration));
  if (!reply.ok()) return reply.status();
  auto result = reply->find("result");
  if (result == reply->end() || !result->is_object()) {
    return Status::InvalidArgument("the step reply has no \"result\" object");
  }
  return std::move(*result);
}

Result<std::string> ProcessTrainable::FreshDirectory(const std::string& kind, int64_t iteration) {
  const std::string dir = trial_dir_ + "/.ztune-" + kind + "-" + std::to_string(iteration) + "-" +
                          std::to_string(getpid()) + "-" + std::to_string(++dir_serial_);
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  return dir;
}

Result<std::string> ProcessTrainable::Save(const TrialContext& ctx) {
  auto dir = FreshDirectory("save", ctx.iteration);
  if (!dir.ok()) return dir.status();
  auto reply = Call(Json{{"cmd", "save"}, {"dir", *dir}}, "save");
  Result<std::string> bytes = reply.ok() ? PackDirectory(*dir, kMaxCheckpointDirectoryBytes)
                                         : Result<std::string>(reply.status());
  std::error_code ec;
  fs::remove_all(*dir, ec);
  return bytes;
}

Status ProcessTrainable::Restore(std::string_view bytes, const TrialContext& ctx) {
  auto dir = FreshDirectory("restore", ctx.iteration);
  if (!dir.ok()) return dir.status();
  std::error_code ec;
  if (Status s = UnpackDirectory(bytes, *dir); !s.ok()) {
    fs::remove_all(*dir, ec);
    return s;
  }
  auto reply =
      Call(Json{{"cmd", "restore"}, {"dir", *dir}, {"iteration", ctx.iteration}}, "restore");
  if (!reply.ok()) {
    fs::remove_all(*dir, ec);
    return reply.status();
  }
  if (!restore_dir_.empty()) fs::remove_all(restore_dir_, ec);
  restore_dir_ = *dir;
  return Status::Ok();
}

bool ProcessTrainable::ResetConfig(const Json& new_config, const TrialContext& ctx) {
  if (!broken_.empty() || output_ == nullptr) return false;
  const std::string old_dir = trial_dir_;
  const std::string new_dir = Absolute(ctx.logdir);
  // The child's output from here on belongs to the new trial (what it prints
  // while it resets included); back to the old files if it declines.
  output_->SwitchTo(new_dir, ctx.attempt, HeaderLine(ctx, ", actor reused"));
  Json command = {{"cmd", "reset"},
                  {"config", new_config},
                  {"trial_id", ctx.trial_id},
                  {"attempt", ctx.attempt},
                  {"trial_dir", new_dir}};
  auto reply = Call(command, "reset");
  bool reset = false;
  if (!reply.ok()) {
    spdlog::warn("reset of {} to trial {} failed: {}", spec_.name, ctx.trial_id,
                 reply.status().message());
  } else if (auto r = reply->find("reset"); r == reply->end() || !r->is_boolean()) {
    spdlog::warn("reset of {} to trial {}: the reply has no boolean \"reset\"", spec_.name,
                 ctx.trial_id);
  } else {
    reset = r->get<bool>();
  }
  if (!reset) {
    if (output_ != nullptr) output_->ReturnTo(old_dir);
    return false;
  }
  trial_dir_ = new_dir;
  return true;
}

Result<Json> ProcessTrainable::ExportModel(const std::vector<std::string>& formats,
                                           const TrialContext& ctx) {
  (void)ctx;
  auto reply = Call(Json{{"cmd", "export"}, {"formats", formats}}, "export");
  if (!reply.ok()) return reply.status();
  auto exports = reply->find("exports");
  if (exports == reply->end() || !exports->is_object()) {
    return Status::InvalidArgument("the export reply has no \"exports\" object");
  }
  return std::move(*exports);
}

void ProcessTrainable::Cleanup() { EndProcess(true); }

void ProcessTrainable::EndProcess(bool graceful) {
  if (child_ == nullptr) return;
  const bool abandoned = stop_flag_ != nullptr && stop_flag_->load();
  if (graceful && broken_.empty() && !abandoned && channel_ != nullptr) {
    // Ask it to clean up and exit, within the grace period.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(spec_.stop_grace_ms);
    auto check = [&]() -> Status {
      if (stop_flag_ != nullptr && stop_flag_->load()) return Status::Aborted("abandoned");
      if (child_->Poll()) return Status::Unavailable("ended");
      if (std::chrono::steady_clock::now() >= deadline) return Status::TimedOut("grace over");
      return Status::Ok();
    };
    Status s = channel_->Write(Json{{"cmd", "stop"}}.dump(), check);
    if (s.ok()) s = channel_->Read(check).status();
    while (s.ok() && !child_->Poll()) {
      if (Status c = check(); !c.ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  channel_.reset();
  child_->CloseCommandFd();
  child_->Terminate(spec_.stop_grace_ms);
  if (output_ != nullptr) output_->Stop();
  if (!restore_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(restore_dir_, ec);
    restore_dir_.clear();
  }
  child_.reset();
}

}  // namespace ztune::worker
