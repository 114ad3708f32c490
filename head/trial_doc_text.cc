#include "head/trial_doc_text.h"

#include <utility>

namespace ztune::head {

// nlohmann's serializer appending to out_: one for the writer's life (it
// allocates its indent buffer once).
struct TrialDocText::Serializer {
  explicit Serializer(std::string& out)
      : s(nlohmann::detail::output_adapter<char, std::string>(out), ' ',
          Json::error_handler_t::replace) {}
  nlohmann::detail::serializer<Json> s;
};

TrialDocText::TrialDocText(const TrialRunner& runner, std::string& out)
    : runner_(runner), out_(out), serializer_(std::make_unique<Serializer>(out)) {}

TrialDocText::~TrialDocText() = default;

void TrialDocText::Key(const char* key) {
  if (!first_key_) out_ += ',';
  first_key_ = false;
  out_ += '"';
  out_ += key;  // our own keys: plain ASCII, nothing to escape
  out_ += "\":";
}

void TrialDocText::Value(const Json& v) {
  serializer_->s.dump(v, /*pretty_print=*/false, /*ensure_ascii=*/false, /*indent_step=*/0);
}

void TrialDocText::String(const std::string& s) { Value(Json(s)); }

void TrialDocText::StringOrNull(const std::string& s) {
  if (s.empty()) {
    out_ += "null";
  } else {
    String(s);
  }
}

// The keys in the order a std::map of TrialDoc's keys holds them (its dump's
// order); TrialDocTextTest checks the text against the DOM's dump.
void TrialDocText::Append(const Trial& t) {
  out_ += '{';
  first_key_ = true;
  Key("attempt");
  Value(Json(t.attempt));
  Key("checkpoints");
  out_ += '[';
  for (size_t i = 0; i < t.checkpoints.size(); ++i) {
    if (i > 0) out_ += ',';
    out_ += "{\"id\":";
    Value(Json(t.checkpoints[i].id));
    out_ += ",\"iteration\":";
    Value(Json(t.checkpoints[i].iteration));
    out_ += ",\"storage\":\"persistent\"}";
  }
  out_ += ']';
  Key("config");
  Value(t.config);
  Key("end_time");
  Value(t.end_time == 0 ? Json() : Json(t.end_time));
  Key("error");
  StringOrNull(t.error);
  Key("error_log");
  out_ += '[';
  for (size_t i = 0; i < t.error_log.size(); ++i) {
    if (i > 0) out_ += ',';
    String(t.error_log[i]);
  }
  out_ += ']';
  Key("experiment_id");
  String(t.experiment_id);
  Key("exploits");
  if (t.exploits.empty()) {
    out_ += "[]";
  } else {
    Value(ExploitsToJson(t.exploits));
  }
  Key("exports");
  Value(t.exports);
  Key("held");
  out_ += t.held ? "true" : "false";
  Key("iteration");
  Value(Json(t.iteration));
  Key("last_result");
  t.last_result.AppendText(out_);
  Key("num_failures");
  Value(Json(t.num_failures));
  Key("num_restores");
  Value(Json(t.num_restores));
  Key("phase");
  String(TrialPhaseName(t.phase));
  Key("resources");
  const Experiment* e = runner_.FindExperiment(t.experiment_id);
  if (e == nullptr) {
    out_ += "null";
  } else {
    if (e != resources_of_) {
      resources_of_ = e;
      resources_text_ =
          e->spec.resources.ToJson().dump(-1, ' ', false, Json::error_handler_t::replace);
    }
    out_ += resources_text_;
  }
  Key("restarted_as");
  StringOrNull(t.restarted_as.str());
  Key("restore_from");
  StringOrNull(t.restore_from.str());
  Key("scheduler");
  Value(t.scheduler_state);
  Key("start_time");
  Value(t.start_time == 0 ? Json() : Json(t.start_time));
  Key("status");
  String(TrialStatusName(t.status));
  Key("trial_id");
  String(t.trial_id.str());
  Key("worker");
  StringOrNull(runner_.WorkerNameOf(t));
  out_ += '}';
}

}  // namespace ztune::head
