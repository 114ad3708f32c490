#include "head/trial_record_scan.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "head/json_text.h"
#include "head/last_result_scan.h"

namespace ztune::head {
namespace {

using json_text::kNone;

// The members a trial record has, sorted as Trial::ToRecordText writes them
// (so that the lookup of the next key is usually the first guess).
enum Field : int {
  kActorWorker,
  kAttempt,
  kAttemptHosts,
  kCheckpointRequested,
  kCheckpointsGivenUpThrough,
  kConfig,
  kEndTime,
  kError,
  kExperimentId,
  kExports,
  kHeld,
  kIteration,
  kLastResult,
  kNextCheckpointId,
  kNumFailures,
  kNumRestores,
  kPauseRequested,
  kPlacement,
  kRestartedAs,
  kRestoreFrom,
  kScheduler,
  kSeq,
  kStartTime,
  kStatus,
  kTrialId,
  kNumFields,
};

constexpr std::array<std::string_view, kNumFields> kFieldNames = {
    "actor_worker",
    "attempt",
    "attempt_hosts",
    "checkpoint_requested",
    "checkpoints_given_up_through",
    "config",
    "end_time",
    "error",
    "experiment_id",
    "exports",
    "held",
    "iteration",
    "last_result",
    "next_checkpoint_id",
    "num_failures",
    "num_restores",
    "pause_requested",
    "placement",
    "restarted_as",
    "restore_from",
    "scheduler",
    "seq",
    "start_time",
    "status",
    "trial_id",
};

constexpr uint32_t Bit(Field f) { return uint32_t{1} << f; }

// What Trial::FromJson reads with at(): a record without one is damaged.
constexpr uint32_t kRequired = Bit(kTrialId) | Bit(kExperimentId) | Bit(kSeq) | Bit(kConfig) |
                               Bit(kStatus) | Bit(kAttempt) | Bit(kNumFailures) | Bit(kIteration) |
                               Bit(kLastResult) | Bit(kNextCheckpointId) | Bit(kError) |
                               Bit(kStartTime) | Bit(kEndTime);

// The field named `key`, or kNumFields; `guess` is tried first.
Field FieldNamed(std::string_view key, int guess) {
  if (guess < kNumFields && kFieldNames[guess] == key) return static_cast<Field>(guess);
  const auto it = std::lower_bound(kFieldNames.begin(), kFieldNames.end(), key);
  if (it == kFieldNames.end() || *it != key) return kNumFields;
  return static_cast<Field>(it - kFieldNames.begin());
}

// Each reader takes a member's whole value text (json_text::SkipValue's
// span, not yet checked) and returns false when it cannot read it exactly as
// nlohmann's DOM and Trial::FromJson would: the record then takes that path.

// nlohmann's DOM of `v`, which must be one JSON value and nothing else.
bool ReadJson(std::string_view v, Json* out) {
  if (std::optional<Json> j = json_text::ReadDom(v)) {
    *out = std::move(*j);
    return true;
  }
  // nlohmann skips a byte order mark at the start of what it parses, which
  // the whole record's parse would refuse in the middle of it: only a value's
  // first character may start what it is given.
  if (v.empty() ||
      std::string_view("{[\"-0123456789tfn").find(v.front()) == std::string_view::npos) {
    return false;
  }
  Json j = Json::parse(v.begin(), v.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return false;
  *out = std::move(j);
  return true;
}

// An integer as StoredInt<T> reads it: get<T>() of nlohmann's int64 or
// uint64 (a token that does not fit is a float to nlohmann: refused here).
template <class T>
bool ReadInt(std::string_view v, T* out) {
  Json n;
  if (!json_text::ReadInteger(v, &n)) return false;
  *out = n.get<T>();
  return true;
}

// A member that is empty when it is [] (placement, attempt_hosts): any other
// value through `from_json`, a Result that refuses what FromJson refuses.
template <class T, class FromJson>
bool ReadList(std::string_view v, FromJson from_json, T* out) {
  if (v == "[]") return true;
  Json j;
  if (!ReadJson(v, &j)) return false;
  try {
    Result<T> read = from_json(j);
    if (!read.ok()) return false;
    *out = std::move(*read);
    return true;
  } catch (const Json::exception&) {
    return false;
  }
}

// get<double>() of any number.
bool ReadDouble(std::string_view v, double* out) {
  size_t i = 0;
  return json_text::ReadNumber(v, &i, out) == json_text::NumberRead::kOk && i == v.size();
}

bool ReadBool(std::string_view v, bool* out) {
  if (v == "true" || v == "false") {
    *out = v == "true";
    return true;
  }
  return false;
}

class RecordReader {
 public:
  explicit RecordReader(std::string_view text) : s_(text) {}

  std::optional<Trial> Read(const MetricKeys* metric_keys) {
    Trial t;
    if (!Members(t)) return std::nullopt;
    if ((seen_ & kRequired) != kRequired) return std::nullopt;
    if (!t.attempt_hosts.empty() && t.attempt_hosts.back().attempt > t.attempt) {
      return std::nullopt;
    }
    if (last_result_.front() == '{') {
      static const std::string kNoMetric;
      const std::string* key = &kNoMetric;
      if (metric_keys != nullptr) {
        if (const auto it = metric_keys->find(t.experiment_id); it != metric_keys->end()) {
          key = &it->second;
        }
      }
      const LastResultScan scan = ScanLastResultText(last_result_, *key);
      if (!scan.status.ok() || scan.needs_dom) return std::nullopt;
      t.last_result.SetStored(std::string(last_result_), *key, scan.metric);
    } else if (last_result_ != "null") {
      return std::nullopt;  // Corruption: the full parse names it
    }
    return t;
  }

 private:
  // The top level: { "key" : value , ... } and nothing after it.
  bool Members(Trial& t) {
    size_t i = json_text::SkipSpace(s_, 0);
    if (i >= s_.size() || s_[i] != '{') return false;
    i = json_text::SkipSpace(s_, i + 1);
    int guess = 0;
    while (i < s_.size() && s_[i] == '"') {
      const size_t key_end = json_text::SkipString(s_, i);
      if (key_end == kNone) return false;
      // A known key is plain ASCII: a match is that key as written, and an
      // escaped or unknown key takes the full parse.
      const Field f = FieldNamed(s_.substr(i + 1, key_end - i - 2), guess);
      if (f == kNumFields || (seen_ & Bit(f)) != 0) return false;
      seen_ |= Bit(f);
      guess = f + 1;
      i = json_text::SkipSpace(s_, key_end);
      if (i >= s_.size() || s_[i] != ':') return false;
      const size_t begin = json_text::SkipSpace(s_, i + 1);
      const size_t end = json_text::SkipValue(s_, begin);
      if (end == kNone || !Member(f, s_.substr(begin, end - begin), t)) return false;
      i = json_text::SkipSpace(s_, end);
      if (i < s_.size() && s_[i] == ',') {
        i = json_text::SkipSpace(s_, i + 1);
        if (i >= s_.size() || s_[i] != '"') return false;
        continue;
      }
      if (i >= s_.size() || s_[i] != '}') return false;
      return json_text::SkipSpace(s_, i + 1) == s_.size();
    }
    return false;  // an empty object, or not a key where one belongs
  }

  // Reads member `f` as Trial::FromJson does.
  bool Member(Field f, std::string_view v, Trial& t) {
    std::string text;
    switch (f) {
      case kActorWorker:
        if (!json_text::ReadString(v, &text)) return false;
        t.actor_worker = WorkerId(std::move(text));
        return true;
      case kAttempt: return ReadInt(v, &t.attempt);
      case kAttemptHosts: return ReadList(v, AttemptHostsFromJson, &t.attempt_hosts);
      case kCheckpointRequested: return ReadBool(v, &t.checkpoint_requested);
      case kCheckpointsGivenUpThrough: return ReadInt(v, &t.checkpoints_given_up_through);
      case kConfig: return ReadJson(v, &t.config);
      case kEndTime: return ReadDouble(v, &t.end_time);
      case kError: return json_text::ReadString(v, &t.error);
      case kExperimentId: return json_text::ReadString(v, &t.experiment_id);
      case kExports: return ReadJson(v, &t.exports);
      case kHeld: return ReadBool(v, &t.held);
      case kIteration: return ReadInt(v, &t.iteration);
      case kLastResult:
        if (v.empty()) return false;
        last_result_ = v;  // read once the experiment (and so the metric) is known
        return true;
      case kNextCheckpointId: return ReadInt(v, &t.next_checkpoint_id);
      case kNumFailures: return ReadInt(v, &t.num_failures);
      case kNumRestores: return ReadInt(v, &t.num_restores);
      case kPauseRequested: return ReadBool(v, &t.pause_requested);
      case kPlacement: return ReadList(v, PlacementFromJson, &t.placement);
      case kRestartedAs:
        if (!json_text::ReadString(v, &text) || text.empty()) return false;
        t.restarted_as = TrialId(std::move(text));
        return true;
      case kRestoreFrom:
        if (!json_text::ReadString(v, &text)) return false;
        t.restore_from = TrialId(std::move(text));
        return true;
      case kScheduler:
        // Its fields are checked by the experiment's scheduler when it takes
        // the trial in (ExperimentScheduler::AddTrial).
        return ReadJson(v, &t.scheduler_state) && t.scheduler_state.is_object();
      case kSeq: return ReadInt(v, &t.seq);
      case kStartTime: return ReadDouble(v, &t.start_time);
      case kStatus: {
        if (!json_text::ReadString(v, &text)) return false;
        Result<TrialStatus> status = ParseTrialStatus(text);
        if (!status.ok()) return false;
        t.status = *status;
        return true;
      }
      case kTrialId:
        if (!json_text::ReadString(v, &text)) return false;
        t.trial_id = TrialId(std::move(text));
        return true;
      case kNumFields: break;
    }
    return false;
  }

  std::string_view s_;
  uint32_t seen_ = 0;  // Bit(f) of every member read
  std::string_view last_result_;
};

}  // namespace

std::optional<Trial> ReadTrialRecordText(std::string_view text, const MetricKeys* metric_keys) {
  return RecordReader(text).Read(metric_keys);
}

}  // namespace ztune::head
