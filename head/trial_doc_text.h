// TrialDocText: a trial's client document (ClientService::TrialDoc) written
// as JSON text straight into a reply, without building its DOM. A page of 100
// trial documents is most of a `trials` or `status` reply; as DOMs each cost
// about a hundred allocations (nlohmann's initializer lists, a copy of the
// config, a parse of the last result) and their frees, half of such a read's
// time (docs/benchmarks.md, "reads alone"). The text is byte for byte what
// TrialDoc(t).dump() writes (keys in nlohmann's sorted order, invalid UTF-8
// replaced as the head's replies do); tests compare the two.
//
// Loop thread only (it reads the runner's state); one per reply.
#pragma once

#include <memory>
#include <string>

#include "common/json.h"
#include "head/trial_runner.h"

namespace ztune::head {

class TrialDocText {
 public:
  // Appends to `out`, which must outlive this writer.
  TrialDocText(const TrialRunner& runner, std::string& out);
  ~TrialDocText();
  TrialDocText(const TrialDocText&) = delete;
  TrialDocText& operator=(const TrialDocText&) = delete;

  // Appends `t`'s document.
  void Append(const Trial& t);

 private:
  void Key(const char* key);  // ,"key": (no comma before the first)
  void Value(const Json& v);
  void String(const std::string& s);
  void StringOrNull(const std::string& s);

  const TrialRunner& runner_;
  std::string& out_;
  struct Serializer;
  std::unique_ptr<Serializer> serializer_;
  bool first_key_ = true;
  // The resources document of the last experiment written (a page's trials
  // mostly share one).
  const Experiment* resources_of_ = nullptr;
  std::string resources_text_;
};

}  // namespace ztune::head
