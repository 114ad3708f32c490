// Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/)
// with the real encoders: protocol::Encode for wire messages, a TrialRunner
// run against ScriptedWorkers for store records, EncodeEnvelope for
// checkpoints; plus hand-written requests and specs from the docs, and
// invalid variants of each. Run by hand after a format change:
//   cmake --build build/fuzz --target fuzz_gen_corpus && build/fuzz/tests/fuzz/fuzz_gen_corpus tests/fuzz/corpus
// Files are named for what they hold; regenerating overwrites them (findings
// saved into a corpus keep their own names).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/protocol/codec.h"
#include "head/trial_runner.h"
#include "storage/in_memory_store.h"
#include "storage/keys.h"
#include "tests/fuzz/scripted_workers.h"
#include "common/checkpoint/checkpoint_envelope.h"

namespace ztune::fuzz {
namespace {

namespace fs = std::filesystem;
namespace p = protocol;

fs::path g_root;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(g_root / target);
  std::ofstream out(g_root / target / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// fuzz_codec's input format: frame count, then length-prefixed frames, the
// last one unprefixed.
std::string Frames(const std::vector<std::string>& frames) {
  std::string out(1, static_cast<char>(frames.size()));
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i + 1 < frames.size()) {
      out.push_back(static_cast<char>(frames[i].size() & 0xff));
      out.push_back(static_cast<char>((frames[i].size() >> 8) & 0xff));
    }
    out += frames[i];
  }
  return out;
}

void Codec() {
  const std::string t = "fuzz_codec";
  auto put = [&](const std::string& name, p::Body body, std::string payload = {}) {
    Write(t, name, Frames(p::Encode(p::Message{std::move(body), std::move(payload)})));
  };
  p::Register reg;
  reg.worker_id = "gpu-box-1-3f2a9c01";
  reg.incarnation = 2;
  reg.name = "gpu-box-1";
  reg.host = "gpu-box-1.lan";
  reg.pid = 4711;
  reg.resources = {{"CPU", 8}, {"GPU", 2}, {"memory", 3.2e10}};
  reg.gpu_ids = {0, 1};
  reg.trainables = {"blob", "fail", "noop", "quadratic", "sleep"};
  put("register_fresh", reg);
  reg.live_actors = {{"e0001_00003", 1, 7, 9, true, {4, 5}}, {"e0002_00000", 3, 0, 0, false, {}}};
  put("register_live_actors", reg);
  reg.features = {p::kFeatureTrains};
  put("register_features", reg);

  put("reply_create_ok", p::Reply{11, "e0001_00000", 1, true, "", Json::object(), 0});
  put("reply_create_error",
      p::Reply{12, "e0001_00001", 1, false,
               "setup of trainable 'quadratic' failed: config key 'lr' must be a number, got string",
               Json::object(), 0});
  put("reply_save_inline",
      p::Reply{13, "e0001_00000", 1, true, "",
               Json{{"iteration", 10}, {"bytes", 61}, {"storage", "persistent"}}, 0},
      checkpoint::EncodeEnvelope({"quadratic", "e0001_00000", 10, 0.52, 10.0, "x=0.1073741824"}));
  put("reply_save_chunked",
      p::Reply{14, "e0001_00000", 1, true, "",
               Json{{"iteration", 20}, {"bytes", 4194304}, {"storage", "persistent"}}, 4194304});
  put("reply_reset", p::Reply{15, "e0001_00004", 1, true, "", Json{{"reset", true}}, 0});
  put("reply_export",
      p::Reply{16, "e0001_00000", 1, true, "",
               Json{{"exports", {{"json", "{\"iteration\": 20, \"x\": 0.01}"}}}}, 0});

  p::ResultBatch batch;
  batch.rid = 21;
  batch.trial_id = "e0001_00000";
  batch.attempt = 1;
  for (int i = 1; i <= 3; ++i) {
    batch.results.push_back(
        {static_cast<uint64_t>(i),
         p::RawResult::FromJson(Json{{"training_iteration", i},
                                     {"loss", 1.0 / i},
                                     {"done", i == 3},
                                     {"eval", {{"acc", 0.3 * i}}},
                                     {"time_this_iter_s", 0.011},
                                     {"time_total_s", 0.011 * i},
                                     {"timestamp", 1764547200 + i},
                                     {"date", "2026-12-01_10-00-0" + std::to_string(i)},
                                     {"trial_id", "e0001_00000"},
                                     {"hostname", "gpu-box-1"},
                                     {"pid", 4711},
                                     {"should_checkpoint", i == 2},
                                     {"tags", {"a", nullptr, 1.5, false}}})});
  }
  put("result_batch", batch);
  p::ResultBatch failed;
  failed.rid = 22;
  failed.trial_id = "e0001_00002";
  failed.attempt = 2;
  failed.failed = true;
  failed.error = "step of iteration 4 failed: exception: boom";
  put("result_failed", failed);
  p::ResultBatch odd = batch;
  odd.results.resize(1);
  Json not_bool = odd.results[0].result.ToJson();
  not_bool["done"] = "yes";  // not a boolean: the head fails the trial
  odd.results[0].result = p::RawResult::FromJson(not_bool);
  put("result_done_not_bool", odd);
  put("results", p::Results{{batch, failed}});

  put("heartbeat", p::Heartbeat{});
  put("disconnect", p::Disconnect{"SIGTERM"});
  put("registered", p::Registered{"gpu-box-1-3f2a9c01", 1000, 3, 5, {}});
  put("create_actor", p::CreateActor{31,
                                     "e0001_00000",
                                     1,
                                     "quadratic",
                                     Json{{"lr", 0.1}, {"x0", 10}, {"nested", {{"a", {1, 2, 3}}}}},
                                     {{"CPU", 1}, {"GPU", 0.5}},
                                     {0},
                                     {},
                                     {}});
  put("fetch_code", p::FetchCode{std::string(64, 'a'), 1 << 20});
  put("code_page", p::CodePage{std::string(64, 'a'), 0, 5, true, ""}, "ZTDIR");
  put("train", p::Train{32, "e0001_00000", 1, 5, 0.5});
  put("trains",
      p::Trains{{p::Train{32, "e0001_00000", 1, 5, 0.5}, p::Train{39, "e0001_00001", 2, 1, 0}}});
  put("registered_features", p::Registered{"gpu-box-1-3f2a9c01", 1000, 3, 5, {p::kFeatureResults}});
  put("save", p::Save{33, "e0001_00000", 1, "memory"});
  put("restore_inline", p::Restore{34, "e0001_00000", 2, 0},
      checkpoint::EncodeEnvelope({"quadratic", "e0001_00000", 10, 0.52, std::nullopt, "x=1"}));
  put("restore_chunked", p::Restore{35, "e0001_00000", 2, 1 << 20});
  put("reset", p::Reset{36, "e0001_00000", 1, "e0001_00004", 1, Json{{"lr", 0.2}}});
  put("stop", p::Stop{37, "e0001_00000", 1, 600000});
  put("export", p::Export{38, "e0001_00000", 1, {"json", "onnx"}});
  put("ack", p::Ack{"e0001_00000", 1, 3, {p::AckEntry{"e0001_00001", 2, 5}}, {}});
  put("ack_trains",
      p::Ack{"e0001_00000",
             1,
             3,
             {},
             {p::Train{40, "e0001_00000", 1, 1, 0}, p::Train{41, "e0001_00001", 2, 1, 0}}});
  put("chunk", p::Chunk{14, 1048576}, std::string(300, '\x5a'));
  put("credit", p::Credit{14, 2097152, false});
  put("credit_cancel", p::Credit{14, 0, true});

  // Invalid messages, each wrong in one way.
  auto frames = p::Encode(p::Message{p::Train{32, "e0001_00000", 1, 5, 0.5}, {}});
  auto variant = [&](const std::string& name, auto change) {
    auto f = frames;
    change(f);
    Write(t, name, Frames(f));
  };
  variant("bad_version", [](auto& f) { f[0] = "ZTUNE2"; });
  variant("command_zero", [](auto& f) { f[1] = std::string(1, '\0'); });
  variant("command_17", [](auto& f) { f[1] = std::string(1, '\x11'); });
  variant("command_two_bytes", [](auto& f) { f[1] = "\x08\x08"; });
  variant("header_truncated", [](auto& f) { f[2].resize(f[2].size() / 2); });
  variant("header_trailing_bytes", [](auto& f) { f[2] += '\xc0'; });
  variant("header_not_map", [](auto& f) { f[2] = p::JsonToMsgpack(Json::array({1, 2})); });
  variant("missing_required", [](auto& f) {
    f[2] = p::JsonToMsgpack(Json{{"rid", 1}, {"trial_id", "e0001_00000"}});
  });
  variant("wrong_type", [](auto& f) {
    f[2] = p::JsonToMsgpack(Json{{"rid", -1}, {"trial_id", "e0001_00000"}, {"attempt", 1}});
  });
  variant("ext_type", [](auto& f) {
    f[1] = std::string(1, '\x02');
    // {"rid": 1, "ok": true, "data": ext8(type 1, 1 byte)}
    f[2] = std::string("\x83\xa3rid\x01\xa2ok\xc3\xa4" "data\xd4\x01\x00", 19);
  });
  variant("two_frames", [](auto& f) { f.resize(2); });
  variant("five_frames", [](auto& f) {
    f.push_back("payload");
    f.push_back("extra");
  });
  variant("chunk_without_payload", [](auto& f) {
    f[1] = std::string(1, '\x0f');
    f[2] = p::JsonToMsgpack(Json{{"rid", 1}, {"offset", 0}});
  });
  variant("invalid_utf8_strings", [](auto& f) {
    f[1] = std::string(1, '\x05');
    f[2] = std::string("\x81\xa6reason\xa4\xff\xfe\xc3\x28", 13);
  });
  Json deep = 1;
  for (int i = 0; i < 70; ++i) deep = Json::array({deep});
  variant("nested_too_deep", [&](auto& f) {
    f[1] = std::string(1, '\x07');
    f[2] = p::JsonToMsgpack(Json{{"rid", 1}, {"trial_id", "t"}, {"attempt", 1},
                                 {"trainable", "noop"}, {"config", deep}});
  });
  Write(t, "empty", "");
}

const char* kBaseSpec =
    R"({"name":"quadratic-demo","trainable":"quadratic","param_space":{"lr":{"loguniform":[0.001,0.5]},"x0":{"grid_search":[5,10]},"target":1},"num_samples":4,"metric":"loss","mode":"min","stop":{"training_iteration":50},"resources":{"bundles":[{"CPU":1}],"strategy":"PACK"},"checkpoint":{"frequency":10,"at_end":true,"num_to_keep":2},"max_failures":0,"max_concurrent_trials":0,"seed":7})";

void ClientRequests() {
  const std::string t = "fuzz_client_request";
  auto put = [&](const std::string& name, const std::vector<std::string>& requests) {
    std::string body;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (i > 0) body.push_back('\0');
      body += requests[i];
    }
    Write(t, name, body);
  };
  // docs/client-protocol.md, op by op, against the fuzz head's e0001 / e0002.
  put("submit_doc_example",
      {R"({"op":"submit","rid":1,"spec":{"name":"quad","trainable":"quadratic","metric":"loss","mode":"min","param_space":{"lr":{"grid_search":[0.01,0.1]}},"stop":{"training_iteration":20}}})"});
  put("submit_example_spec", {std::string(R"({"op":"submit","rid":1,"spec":)") + kBaseSpec + "}"});
  put("submit_fail_fast",
      {R"({"op":"submit","rid":1,"spec":{"trainable":"fail","fail_fast":true,"num_samples":3}})",
       R"({"op":"status","rid":2,"experiment_id":"e0003"})"});
  put("submit_retries",
      {R"({"op":"submit","rid":1,"spec":{"trainable":"fail","max_failures":2,"checkpoint":{"frequency":1}}})",
       R"({"op":"resume","rid":2,"id":"e0003","errored":"retry"})",
       R"({"op":"resume","rid":3,"id":"e0003","errored":"restart"})"});
  put("submit_reuse_actors",
      {R"({"op":"submit","rid":1,"spec":{"trainable":"quadratic","reuse_actors":true,"max_concurrent_trials":1,"param_space":{"lr":{"grid_search":[0.1,0.2,0.3]}},"stop":{"training_iteration":3},"export_formats":["json"]}})"});
  put("submit_gpu_bundles",
      {R"({"op":"submit","rid":1,"spec":{"trainable":"quadratic","resources":{"bundles":[{},{"CPU":1,"GPU":0.5}],"strategy":"SPREAD"},"stop":{"eval":{"acc":0.5}},"result_buffer_length":4}})"});
  put("submit_infeasible",
      {R"({"op":"submit","rid":1,"spec":{"trainable":"quadratic","resources":{"bundles":[{"CPU":64}]}}})"});
  put("submit_unknown_trainable", {R"({"op":"submit","rid":1,"spec":{"trainable":"sleep"}})"});
  put("submit_missing_spec", {R"({"op":"submit","rid":1})"});
  put("add_trial", {R"({"op":"add_trial","rid":1,"experiment_id":"e0001","config":{"lr":0.05,"x0":3}})"});
  put("add_trial_restore_from",
      {R"({"op":"add_trial","rid":1,"experiment_id":"e0001","config":{"lr":0.05},"restore_from":"e0001_00000"})"});
  put("add_trial_finished", {R"({"op":"add_trial","rid":1,"experiment_id":"e0002","config":{}})"});
  put("add_trial_wait",
      {R"({"op":"add_trial","rid":1,"experiment_id":"e0001","config":{"lr":0.05},"wait_ms":500})"});
  put("wait_trials",
      {R"({"op":"wait_trials","rid":1,"trial_ids":["e0001_00000","e0001_00001"],"wait_ms":200})",
       R"({"op":"wait_trials","rid":2,"trial_ids":["e0001_00000"]})"});
  put("external_search",
      {R"({"op":"submit","rid":1,"spec":{"trainable":"quadratic","num_samples":2,"param_space":{"lr":{"loguniform":[0.001,1]}},"search_alg":{"type":"external","max_concurrent":1},"stop":{"training_iteration":2}}})",
       R"({"op":"add_trial","rid":2,"experiment_id":"e0003","config":{"lr":0.1},"wait_ms":100})",
       R"({"op":"add_trial","rid":3,"experiment_id":"e0003","config":{"lr":0.2},"wait_ms":100})",
       R"({"op":"wait_trials","rid":4,"trial_ids":["e0003_00000"],"wait_ms":100})"});
  put("experiments", {R"({"op":"experiments","rid":1})"});
  put("experiment", {R"({"op":"experiment","rid":1,"experiment_id":"e0001"})"});
  put("status_all", {R"({"op":"status","rid":1})"});
  put("status_one", {R"({"op":"status","rid":1,"experiment_id":"e0001"})"});
  put("status_null", {R"({"op":"status","rid":1,"experiment_id":null})"});
  put("trials", {R"({"op":"trials","rid":1,"experiment_id":"e0001"})"});
  put("trial", {R"({"op":"trial","rid":2,"trial_id":"e0001_00000"})"});
  put("trial_unknown", {R"({"op":"trial","rid":2,"trial_id":"e0001_00007"})"});
  put("results", {R"({"op":"results","rid":1,"trial_id":"e0001_00000"})"});
  put("workers", {R"({"op":"workers","rid":1})"});
  put("stop_trial", {R"({"op":"stop","rid":1,"id":"e0001_00000"})"});
  put("stop_experiment",
      {R"({"op":"stop","rid":1,"id":"e0001"})", R"({"op":"experiment","rid":2,"experiment_id":"e0001"})"});
  put("pause_resume",
      {R"({"op":"pause","rid":1,"trial_id":"e0001_00000"})", R"({"op":"trial","rid":2,"trial_id":"e0001_00000"})",
       R"({"op":"resume","rid":3,"id":"e0001_00000"})", R"({"op":"trial","rid":4,"trial_id":"e0001_00000"})"});
  put("pause_then_stop",
      {R"({"op":"pause","rid":1,"trial_id":"e0001_00000"})", R"({"op":"stop","rid":2,"id":"e0001_00000"})",
       R"({"op":"resume","rid":3,"trial_id":"e0001_00000"})"});
  put("lifecycle_mix",
      {R"({"op":"add_trial","rid":1,"experiment_id":"e0001","config":{"lr":0.3}})",
       R"({"op":"pause","rid":2,"trial_id":"e0001_00000"})",
       R"({"op":"submit","rid":3,"spec":{"trainable":"noop","num_samples":2}})",
       R"({"op":"stop","rid":4,"id":"e0001_00001"})",
       R"({"op":"resume","rid":5,"id":"e0001","errored":"restart","unfinished":true})",
       R"({"op":"resume","rid":6,"trial_id":"e0001_00000"})",
       R"({"op":"trials","rid":7,"experiment_id":"e0002"})",
       R"({"op":"results","rid":8,"trial_id":"e0001_00000"})"});
  put("resume_experiment_unfinished_false",
      {R"({"op":"resume","rid":1,"id":"e0001","unfinished":false})"});
  put("resume_experiment_bad_errored", {R"({"op":"resume","rid":1,"id":"e0001","errored":"again"})"});
  put("resume_not_paused", {R"({"op":"resume","rid":1,"id":"e0002_00000"})"});
  // Malformed requests (docs: "When the head cannot even read the request").
  put("op_not_string", {R"({"op":5,"rid":1})"});
  put("arg_wrong_type", {R"({"op":"resume","rid":1,"id":5})"});
  put("unknown_op", {R"({"op":"launch","rid":1})"});
  put("not_object", {R"([{"op":"status"}])"});
  put("invalid_json", {R"({"op":"status","rid":)"});
  put("rid_object", {R"({"op":"experiments","rid":{"a":[1,2,{"b":null}]}})"});
  std::string deep = R"({"op":"status","rid":)";
  for (int i = 0; i < 70; ++i) deep += "[";
  for (int i = 0; i < 70; ++i) deep += "]";
  put("nested_too_deep", {deep + "}"});
  put("unicode_ids", {R"({"op":"trial","rid":1,"trial_id":"e0001_\u00e9\ud83d\ude00"})"});
  put("empty", {""});
}

void Specs() {
  const std::string t = "fuzz_spec";
  auto put = [&](const std::string& name, const std::string& json) { Write(t, name, json); };
  put("example_quadratic", kBaseSpec);
  put("doc_client_protocol",
      R"({"name":"quad","trainable":"quadratic","metric":"loss","mode":"min","param_space":{"lr":{"grid_search":[0.01,0.1,0.3]}},"stop":{"training_iteration":20}})");
  put("minimal", R"({"trainable":"noop"})");
  put("every_key",
      R"({"name":"all","trainable":"quadratic","param_space":{"a":{"choice":["x",2,null]},"b":{"uniform":[-1,1]},"c":{"quniform":[0,10,0.5]},"d":{"randint":[-3,4]},"e":{"normal":[0,2.5]},"nested":{"f":{"grid_search":[[1],[2,3]]},"g":{"h":{"loguniform":[1e-5,1e-1]}}}},"num_samples":3,"metric":"eval/acc","mode":"max","stop":{"eval":{"acc":0.99},"training_iteration":100,"done":true},"resources":{"bundles":[{},{"CPU":2,"GPU":0.25,"memory":1e9}],"strategy":"STRICT_SPREAD"},"checkpoint":{"frequency":5,"at_end":false,"num_to_keep":null,"score_attribute":"eval/acc","score_order":"min"},"max_failures":-1,"max_concurrent_trials":2,"seed":0,"fail_fast":false,"reuse_actors":true,"export_formats":["json","onnx"],"force_cleanup_s":1.5,"timeouts":{"setup_s":600,"step_s":null,"checkpoint_s":30.5},"result_buffer_length":8,"result_buffer_min_time_s":0.5,"result_buffer_max_time_s":10})");
  put("grid_cross", R"({"trainable":"quadratic","param_space":{"a":{"grid_search":[1,2,3]},"b":{"grid_search":["x","y"]},"c":{"d":{"grid_search":[true,false]}}},"num_samples":2})");
  put("flattened_stop", R"({"trainable":"quadratic","stop":{"info/acc":0.9,"info":{"loss":0.1}}})");
  // Invalid specs, one error each (docs/spec.md's rules).
  put("unknown_key", R"({"trainable":"quadratic","samples":4})");
  put("no_trainable", R"({"name":"x"})");
  put("negative_frequency", R"({"trainable":"quadratic","checkpoint":{"frequency":-1}})");
  put("metric_without_mode", R"({"trainable":"quadratic","metric":"loss"})");
  put("bad_mode", R"({"trainable":"quadratic","metric":"loss","mode":"lowest"})");
  put("fail_fast_with_retries", R"({"trainable":"quadratic","fail_fast":true,"max_failures":2})");
  put("bad_strategy", R"({"trainable":"quadratic","resources":{"strategy":"CLUSTER"}})");
  put("empty_bundles", R"({"trainable":"quadratic","resources":{"bundles":[]}})");
  put("only_empty_bundle", R"({"trainable":"quadratic","resources":{"bundles":[{}]}})");
  put("negative_resource", R"({"trainable":"quadratic","resources":{"bundles":[{"CPU":-1}]}})");
  put("huge_resource", R"({"trainable":"quadratic","resources":{"bundles":[{"CPU":1e300},{"CPU":9e14}]}})");
  put("grid_too_large",
      R"({"trainable":"quadratic","param_space":{"a":{"grid_search":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},"b":{"grid_search":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},"c":{"grid_search":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},"d":{"grid_search":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},"e":{"grid_search":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},"f":{"grid_search":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}}})");
  put("randint_floats", R"({"trainable":"quadratic","param_space":{"a":{"randint":[0.5,3]}}})");
  put("randint_extremes", R"({"trainable":"quadratic","param_space":{"a":{"randint":[-9223372036854775808,9223372036854775807]}}})");
  put("loguniform_zero", R"({"trainable":"quadratic","param_space":{"a":{"loguniform":[0,1]}}})");
  put("uniform_extremes", R"({"trainable":"quadratic","param_space":{"a":{"uniform":[-1.7e308,1.7e308]}}})");
  put("choice_empty", R"({"trainable":"quadratic","param_space":{"a":{"choice":[]}}})");
  put("seed_too_large", R"({"trainable":"quadratic","seed":18446744073709551615})");
  put("num_samples_huge", R"({"trainable":"quadratic","num_samples":9223372036854775807,"param_space":{"a":{"grid_search":[1,2,3]}}})");
  put("buffer_min_above_max", R"({"trainable":"quadratic","result_buffer_min_time_s":5,"result_buffer_max_time_s":1})");
  put("stop_string", R"({"trainable":"quadratic","stop":{"loss":"low"}})");
  std::string deep = R"({"trainable":"quadratic","param_space":)";
  for (int i = 0; i < 40; ++i) deep += R"({"k":)";
  deep += "1";
  for (int i = 0; i < 40; ++i) deep += "}";
  put("param_space_too_deep", deep + "}");
  put("param_space_only", R"({"lr":{"grid_search":[0.1,0.2]},"x":{"normal":[0,1]},"c":"const"})");
  put("not_object", R"([1,2,3])");
  put("invalid_json", R"({"trainable":)");
}

void StoreRecords() {
  const std::string t = "fuzz_store_records";
  // A real head run: e0001 RUNNING with results and checkpoints, e0002 done.
  storage::InMemoryStore store;
  ScriptedWorkers workers;
  FakeClock clock;
  head::RunnerOptions options;
  options.heartbeat_ms = 100;
  head::TrialRunner runner(store, workers, clock, options);
  if (!runner.Load().ok()) std::abort();
  workers.Register(runner, "w1", 4, 1);
  workers.Turn(runner, store, clock);
  for (const char* spec :
       {R"({"name":"base","trainable":"quadratic","seed":1,"max_failures":1,"param_space":{"lr":{"grid_search":[0.1,0.2]},"x0":{"uniform":[0,1]}},"metric":"loss","mode":"min","stop":{"training_iteration":40},"checkpoint":{"frequency":2,"num_to_keep":2,"at_end":true},"export_formats":["json"]})",
        R"({"trainable":"noop","seed":2})",
        R"({"trainable":"fail","seed":3,"max_failures":1})"}) {
    if (!runner.Submit(Json::parse(spec)).ok()) std::abort();
  }
  for (int i = 0; i < 8; ++i) workers.Turn(runner, store, clock);
  if (!runner.PauseTrial("e0001_00001", /*hold=*/true).ok()) std::abort();
  for (int i = 0; i < 3; ++i) workers.Turn(runner, store, clock);

  auto record = [&](char mode, const std::string& name, const std::string& bytes) {
    Write(t, name, std::string(1, mode) + bytes);
  };
  std::string image;
  auto add = [&](storage::Family f, const std::string& key, const std::string& value) {
    image.push_back(static_cast<char>(f));
    image.push_back(static_cast<char>(key.size()));
    image += key;
    image.push_back(static_cast<char>(value.size() & 0xff));
    image.push_back(static_cast<char>((value.size() >> 8) & 0xff));
    image += value;
  };
  for (int fi = 0; fi < storage::kNumFamilies; ++fi) {
    auto f = static_cast<storage::Family>(fi);
    int n = 0;
    int children = 0;
    store.Scan(f, "", [&](std::string_view k, std::string_view v) {
      std::string key(k), value(v);
      if (f == storage::Family::kTrials && !storage::IsTrialChildKey(k)) {
        record('\0', "trial_" + key, value);
      }
      if (f == storage::Family::kTrials && storage::IsTrialChildKey(k) && children < 2) {
        record('\2', "trial_child_key_" + std::to_string(children++), key);  // keys hold a '\0'
      }
      if (f == storage::Family::kExperiments) record('\1', "experiment_" + key, value);
      if ((f == storage::Family::kResults || f == storage::Family::kCheckpoints) && n < 2) {
        record('\2', std::string(storage::FamilyName(f)) + "_key_" + std::to_string(n), key);
      }
      if (f == storage::Family::kCheckpoints && n < 1) record('\3', "checkpoint_bytes", value);
      ++n;
      // Keep the image small (its size is the target's speed): e0002 (one
      // finished trial, like e0003's) left out, two results per trial.
      const bool skip = key.rfind("e0002", 0) == 0 ||
                        (f == storage::Family::kResults && storage::KeySuffixNumber(k).value_or(0) > 2);
      if (!skip) add(f, key, value);
      return true;
    }).IgnoreError();
  }
  record('\4', "store_image_running", image);
  record('\4', "store_image_empty", "");

  // Hand-made corrupt records and images.
  record('\0', "trial_not_json", "{\"trial_id\": ");
  record('\0', "trial_wrong_types",
         R"({"trial_id":"e0001_00000","experiment_id":"e0001","seq":-1,"config":{},"status":"RUNNING","attempt":1,"num_failures":0,"iteration":0,"last_result":null,"checkpoints":[{"id":"1"}],"next_checkpoint_id":1,"error":"","error_log":[],"start_time":0,"end_time":0})");
  record('\0', "trial_bad_status",
         R"({"trial_id":"e0001_00000","experiment_id":"e0001","seq":1,"config":{},"status":"SLEEPING","attempt":1,"num_failures":0,"iteration":0,"last_result":null,"checkpoints":[],"next_checkpoint_id":1,"error":"","error_log":[],"start_time":0,"end_time":0})");
  record('\0', "trial_bad_placement",
         R"({"trial_id":"e0001_00000","experiment_id":"e0001","seq":1,"config":{},"status":"RUNNING","attempt":1,"num_failures":0,"iteration":0,"last_result":null,"checkpoints":[],"next_checkpoint_id":1,"error":"","error_log":[],"start_time":0,"end_time":0,"actor_worker":"w1","placement":[{"worker_id":"w1","resources":{"CPU":-2},"gpu_ids":[0]}]})");
  record('\1', "experiment_bad_spec",
         R"({"experiment_id":"e0001","spec":{"trainable":""},"finished":false,"stopped":false,"created_at":0,"next_variant":0,"total_variants":1,"next_trial_index":0})");
  record('\2', "key_short", std::string("t\0\0\0", 4));
  record('\2', "key_no_separator", "e0001_00000xxxxxxxx");
  checkpoint::CheckpointEnvelope env{"quadratic", "e0001_00000", 12, 1.25, 12.0, "state"};
  std::string good = checkpoint::EncodeEnvelope(env);
  record('\3', "envelope_valid", good);
  record('\3', "envelope_truncated", good.substr(0, good.size() - 3));
  std::string bad_crc = good;
  bad_crc.back() ^= 1;
  record('\3', "envelope_bad_crc", bad_crc);
  record('\3', "envelope_trailing", good + "zz");
  std::string bad_len = good;
  bad_len[8] = '\xff';  // trainable length
  record('\3', "envelope_bad_length", bad_len);
  std::string corrupt;
  add(storage::Family::kExperiments, "e0001", "not json");
  corrupt.swap(image);
  record('\4', "store_image_corrupt_experiment", corrupt);
  image.clear();
  add(storage::Family::kResults, std::string("ghost\0\0\0\0\0\0\0\0\1", 14), R"({"training_iteration":1})");
  add(storage::Family::kCheckpoints, "short", "");
  record('\4', "store_image_orphans", image);
}

}  // namespace
}  // namespace ztune::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_ROOT (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  spdlog::set_level(spdlog::level::off);
  ztune::fuzz::g_root = argv[1];
  ztune::fuzz::Codec();
  ztune::fuzz::ClientRequests();
  ztune::fuzz::Specs();
  ztune::fuzz::StoreRecords();
  return 0;
}
