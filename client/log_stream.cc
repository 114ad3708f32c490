#include "client/log_stream.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "common/base64.h"

namespace ztune::client {
namespace {

// One `logs` reply, its fields checked (the head is a peer too).
struct LogPage {
  uint64_t attempt = 0;
  std::vector<uint64_t> attempts;
  std::string bytes;
  uint64_t size = 0;
  uint64_t next_offset = 0;
  bool complete = false;
  bool trial_finished = false;
};

Result<LogPage> ParsePage(const Json& r) {
  LogPage p;
  auto uint_field = [&](const char* key, uint64_t& out) {
    auto it = r.find(key);
    if (it == r.end() || !it->is_number_unsigned()) return false;
    out = it->get<uint64_t>();
    return true;
  };
  auto data = r.find("data");
  auto attempts = r.find("attempts");
  auto complete = r.find("complete");
  auto status = r.find("trial_status");
  if (!uint_field("attempt", p.attempt) || !uint_field("size", p.size) ||
      !uint_field("next_offset", p.next_offset) || data == r.end() || !data->is_string() ||
      attempts == r.end() || !attempts->is_array() || complete == r.end() ||
      !complete->is_boolean() || status == r.end() || !status->is_string()) {
    return Status::Internal("the head's logs reply lacks a field or has one of the wrong type");
  }
  for (const Json& a : *attempts) {
    if (!a.is_number_unsigned()) return Status::Internal("the head's logs reply: bad attempts");
    p.attempts.push_back(a.get<uint64_t>());
  }
  std::sort(p.attempts.begin(), p.attempts.end());
  auto bytes = Base64Decode(data->get<std::string>());
  if (!bytes.ok()) return Status::Internal("the head sent bad base64: " + bytes.status().message());
  p.bytes = std::move(bytes).value();
  p.complete = complete->get<bool>();
  p.trial_finished = *status == "TERMINATED" || *status == "ERROR";
  return p;
}

class LogStreamer {
 public:
  LogStreamer(const CommandContext& ctx, const LogsOptions& options)
      : ctx_(ctx), options_(options) {}

  int Run() {
    // The first page says which attempts there are (and is the newest's).
    Result<LogPage> first = Fetch(options_.attempt, 0);
    if (!first.ok()) return ReportCallError(ctx_, first.status());
    std::vector<uint64_t> attempts =
        options_.attempt.has_value() ? std::vector<uint64_t>{*options_.attempt} : first->attempts;
    while (attempts.empty()) {
      if (!options_.follow || first->trial_finished) {
        ctx_.err << "trial " << options_.trial_id << " has no output yet (it has not started)\n";
        return kExitOk;
      }
      Sleep();
      first = Fetch(std::nullopt, 0);
      if (!first.ok()) return ReportCallError(ctx_, first.status());
      attempts = first->attempts;
    }
    std::optional<LogPage> cached;
    if (first->attempt == attempts.front()) cached = std::move(first).value();
    size_t index = 0;
    uint64_t offset = 0;
    while (true) {
      const uint64_t attempt = attempts[index];
      Result<LogPage> page =
          cached.has_value() ? Result<LogPage>(std::move(*cached)) : Fetch(attempt, offset);
      cached.reset();
      if (!page.ok()) {
        // An older attempt whose worker is gone: say so, go on with the next.
        const bool more = index + 1 < attempts.size();
        if (page.status().code() != StatusCode::kUnavailable || !more ||
            options_.attempt.has_value()) {
          return ReportCallError(ctx_, page.status());
        }
        ctx_.err << "ztune logs: skipping attempt " << attempt << ": " << page.status().message()
                 << '\n';
        ++index;
        offset = 0;
        continue;
      }
      ctx_.out.write(page->bytes.data(), static_cast<std::streamsize>(page->bytes.size()));
      ctx_.out.flush();
      offset = std::max(offset, page->next_offset);
      if (offset < page->size) continue;  // more is there already
      if (!options_.attempt.has_value()) Merge(attempts, page->attempts);
      const bool newer = index + 1 < attempts.size();
      if (!options_.follow) {
        if (!newer) return kExitOk;
      } else if (!page->complete) {
        Sleep();
        continue;
      } else if (!newer && (page->trial_finished || options_.attempt.has_value())) {
        return kExitOk;
      } else if (!newer) {
        Sleep();  // the trial goes on: a retry or a resume starts a new attempt
        continue;
      }
      ++index;
      offset = 0;
    }
  }

 private:
  Result<LogPage> Fetch(std::optional<uint64_t> attempt, uint64_t offset) {
    Json args{{"trial_id", options_.trial_id},
              {"stream", options_.stderr_stream ? "stderr" : "stdout"},
              {"offset", offset}};
    if (attempt.has_value()) args["attempt"] = *attempt;
    Result<Json> reply = ctx_.client.Call("logs", std::move(args));
    if (!reply.ok()) return reply.status();
    return ParsePage(*reply);
  }

  // Attempts the head learnt of since (it keeps the newest few only, so
  // old ones may drop off the front: what was shown stays shown).
  static void Merge(std::vector<uint64_t>& attempts, const std::vector<uint64_t>& now) {
    for (uint64_t a : now) {
      if (a > attempts.back()) attempts.push_back(a);
    }
  }

  void Sleep() const {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::max(1, options_.interval_ms)));
  }

  const CommandContext& ctx_;
  const LogsOptions& options_;
};

}  // namespace

int RunLogs(const CommandContext& ctx, const LogsOptions& options) {
  return LogStreamer(ctx, options).Run();
}

}  // namespace ztune::client
