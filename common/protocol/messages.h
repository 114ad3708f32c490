// Head <-> worker messages. The contract is docs/protocol.md; this header is its
// C++ form. Each message is a plain struct plus a field visitor that the codec
// (codec.cc, with msgpack_io.cc and result_view.cc the only files that know
// msgpack) uses to
// encode and decode it.
//
// Frames on the wire: [version "ZTUNE1"][command: 1 byte][msgpack header map]
// [optional raw payload: checkpoint bytes, never re-encoded]. Unknown header keys
// are ignored; missing optional keys take the struct default. Plain values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "common/json.h"

namespace ztune::protocol {

inline constexpr char kVersion[] = "ZTUNE1";
// The first 6 bytes of a message in the one-frame layout (kFeatureOneFrame):
// version, command byte and header in one frame, the payload (if any) in a
// second.
inline constexpr char kVersionOneFrame[] = "ZTUNE2";
// The largest frame either side of the worker link accepts (ZMQ_MAXMSGSIZE);
// a bigger one closes the connection. Checkpoints travel in 1 MiB chunks, so
// only a result batch or a reply with a huge `data` could exceed it: the
// worker sends a failure in its place.
inline constexpr int64_t kMaxFrameBytes = 64LL << 20;

// Field presence for decoding.
enum class Need { kRequired, kOptional };

// Features a peer announces at registration (REGISTER's and REGISTERED's
// `features`): what it can decode beyond the commands every version has. A
// peer sends a coalesced message only to one that announced it, so older
// workers and older heads keep working.
// The worker decodes TRAINS (Trains).
inline constexpr char kFeatureTrains[] = "trains";
// The head decodes RESULTS (Results).
inline constexpr char kFeatureResults[] = "results";
// The worker takes TRAINs inside an ACK (Ack::trains).
inline constexpr char kFeatureAckTrains[] = "ack_trains";
// The peer decodes messages in the one-frame layout (kVersionOneFrame), which
// each side then sends it: with CURVE every frame is a box of its own, and
// ZeroMQ handles each frame apart; two frames fewer per message took 15% off
// the head's CPU per result under 1,000 simulated workers (docs/benchmarks.md,
// "fleet", 2026-12-07 afternoon).
inline constexpr char kFeatureOneFrame[] = "one_frame";
// The most entries one TRAINS, RESULTS or ACK's `trains` carries; more are
// refused whole.
inline constexpr size_t kMaxCoalesced = 4096;

// ---- worker -> head ----

// A live actor the worker hosts (re-attach after a head restart).
struct LiveActor {
  std::string trial_id;
  uint64_t attempt = 0;
  uint64_t acked_seq = 0;
  int64_t iteration = 0;
  bool training = false;  // a TRAIN is queued or running: its batch will follow
  // Request ids this worker has accepted for the actor lately (answered or
  // not): a command sent again with one of them is answered, not re-run.
  std::vector<uint64_t> rids;
  template <class V>
  void Visit(V& v) {
    v("trial_id", trial_id, Need::kRequired);
    v("attempt", attempt, Need::kRequired);
    v("acked_seq", acked_seq, Need::kOptional);
    v("iteration", iteration, Need::kOptional);
    v("training", training, Need::kOptional);
    v("rids", rids, Need::kOptional);
  }
};

// The model formats one trainable's export can produce (REGISTER).
struct TrainableExports {
  std::string trainable;
  std::vector<std::string> formats;
  template <class V>
  void Visit(V& v) {
    v("trainable", trainable, Need::kRequired);
    v("formats", formats, Need::kRequired);
  }
};

struct Register {
  std::string worker_id;  // stable for the worker process' lifetime
  uint64_t incarnation = 0;
  std::string name;
  std::string host;
  int64_t pid = 0;
  std::map<std::string, double> resources;  // totals: CPU, GPU, memory, custom
  std::vector<int64_t> gpu_ids;             // device ids behind GPU
  std::vector<std::string> trainables;      // names this worker can host
  // The trainables that declare their export formats (others: any is tried).
  std::vector<TrainableExports> export_formats;
  std::vector<LiveActor> live_actors;
  std::vector<std::string> features;  // kFeatureTrains
  template <class V>
  void Visit(V& v) {
    v("worker_id", worker_id, Need::kRequired);
    v("incarnation", incarnation, Need::kOptional);
    v("name", name, Need::kOptional);
    v("host", host, Need::kOptional);
    v("pid", pid, Need::kOptional);
    v("resources", resources, Need::kRequired);
    v("gpu_ids", gpu_ids, Need::kOptional);
    v("trainables", trainables, Need::kOptional);
    v("export_formats", export_formats, Need::kOptional);
    v("live_actors", live_actors, Need::kOptional);
    v("features", features, Need::kOptional);
  }
};

// The answer to every request but TRAIN. For SAVE the checkpoint bytes are
// the payload frame, or, when `payload_bytes` > 0, follow as CHUNKs (see
// Chunk); `data` holds {"iteration": N, ...}.
struct Reply {
  uint64_t rid = 0;
  std::string trial_id;
  uint64_t attempt = 0;
  bool ok = true;
  std::string error;
  Json data;
  uint64_t payload_bytes = 0;  // > 0: a chunked payload of this size follows
  template <class V>
  void Visit(V& v) {
    v("rid", rid, Need::kRequired);
    v("trial_id", trial_id, Need::kOptional);
    v("attempt", attempt, Need::kOptional);
    v("ok", ok, Need::kRequired);
    v("error", error, Need::kOptional);
    v("data", data, Need::kOptional);
    v("payload_bytes", payload_bytes, Need::kOptional);
  }
};

// One result, kept as msgpack bytes rather than a JSON DOM: the head stores,
// judges and acknowledges results without building one per result (a DOM
// built, dumped and freed per result was a quarter of the head's loop,
// docs/benchmarks.md). Decoded bytes are in the codec's normal form: any
// msgpack value without ext types, nested at most 64 deep, map keys strings,
// every string and key valid UTF-8 (invalid bytes replaced), every float a
// float64. protocol::ResultView reads them.
struct RawResult {
  // Not an aggregate: nlohmann's implicit conversion would let a Json object
  // initialise `bytes` and throw at run time.
  RawResult() = default;
  explicit RawResult(std::string msgpack) : bytes(std::move(msgpack)) {}

  std::string bytes;
  // The bytes a worker sends for `j` (codec.cc).
  static RawResult FromJson(const Json& j);
  // The DOM of the bytes (null if they are not msgpack); for code off the hot
  // path: schedulers that judge results, tests.
  Json ToJson() const;
  bool operator==(const RawResult&) const = default;
};

struct ResultRecord {
  uint64_t seq = 0;  // per (trial, attempt), from 1
  RawResult result;  // a map with the auto-filled fields
  template <class V>
  void Visit(V& v) {
    v("seq", seq, Need::kRequired);
    v("result", result, Need::kRequired);
  }
};

// The answer to TRAIN: the buffered results, and the step error if one happened
// after them (`failed`).
struct ResultBatch {
  uint64_t rid = 0;
  std::string trial_id;
  uint64_t attempt = 0;
  std::vector<ResultRecord> results;
  bool failed = false;
  std::string error;
  template <class V>
  void Visit(V& v) {
    v("rid", rid, Need::kRequired);
    v("trial_id", trial_id, Need::kRequired);
    v("attempt", attempt, Need::kRequired);
    v("results", results, Need::kOptional);
    v("failed", failed, Need::kOptional);
    v("error", error, Need::kOptional);
  }
};

// ---- both directions ----

struct Heartbeat {
  template <class V>
  void Visit(V&) {}
};

// Head -> worker: "I do not know you, register again". Worker -> head: leaving.
struct Disconnect {
  std::string reason;
  template <class V>
  void Visit(V& v) {
    v("reason", reason, Need::kOptional);
  }
};

// ---- head -> worker ----

struct Registered {
  std::string worker_id;
  int64_t heartbeat_ms = 1000;
  int64_t liveness = 3;
  uint64_t head_epoch = 0;
  std::vector<std::string> features;  // kFeatureResults
  template <class V>
  void Visit(V& v) {
    v("worker_id", worker_id, Need::kRequired);
    v("heartbeat_ms", heartbeat_ms, Need::kOptional);
    v("liveness", liveness, Need::kOptional);
    v("head_epoch", head_epoch, Need::kOptional);
    v("features", features, Need::kOptional);
  }
};

struct CreateActor {
  uint64_t rid = 0;
  std::string trial_id;
  uint64_t attempt = 0;
  std::string trainable;
  Json config;
  std::map<std::string, double> resources;  // bundle 0 (the actor's own)
  std::vector<int64_t> gpu_ids;             // devices of all bundles on this worker
  // Submitted code (trainable kSubmittedPythonTrainable): "FILE:NAME" in the
  // uploaded project, and the project archive's sha256 (64 hex digits), which
  // the worker fetches with FETCH_CODE unless it has it.
  std::string entry;
  std::string code;
  template <class V>
  void Visit(V& v) {
    v("rid", rid, Need::kRequired);
    v("trial_id", trial_id, Need::kRequired);
    v("attempt", attempt, Need::kRequired);
    v("trainable", trainable, Need::kRequired);
    v("config", config, Need::kOptional);
    v("resources", resources, Need::kOptional);
    v("gpu_ids", gpu_ids, Need::kOptional);
    v("entry", entry, Need::kOptional);
    v("code", code, Need::kOptional);
  }
};

// Run up to `buffer_length` steps (at least one) within `buffer_time_s`; stop
// early at `done` or `should_checkpoint`. Answered by a ResultBatch.
struct Train {
  uint64_t rid = 0;
  std::string trial_id;
  uint64_t attempt = 0;
  int64_t buffer_length = 1;
  double buffer_time_s = 0;
  template <class V>
  void Visit(V& v) {
    v("rid", rid, Need::kRequired);
    v("trial_id", trial_id, Need::kRequired);
    v("attempt", attempt, Need::kRequired);
    v("buffer_length", buffer_length, Need::kOptional);
    v("buffer_time_s", buffer_time_s, Need::kOptional);
  }
};

struct Save {
  uint64_t rid = 0;
  std::string trial_id;
  uint64_t attempt = 0;
  std::string storage = "persistent";  // "memory" | "persistent"
  template <class V>
  void Visit(V& v) {
    v("rid", rid, Need::kRequired);
    v("trial_id", trial_id, Need::kRequired);
    v("attempt", attempt, Need::kRequired);
    v("storage", storage, Need::kOptional);
  }
};

// Checkpoint bytes produced by an earlier SAVE: the payload frame, or, when
// `payload_bytes` > 0, CHUNKs that follow.
struct Restore {
  uint64_t rid = 0;
  std::string trial_id;
  uint64_t attempt = 0;
  uint64_t payload_bytes = 0;  // > 0: a chunked payload of this size follows
  template <class V>
  void Visit(V& v) {
    v("rid", rid, Need::kRequired);
    v("trial_id", trial_id, Need::kRequired);
    v("attempt", attempt, Need::kRequired);
    v("payload_bytes", payload_bytes, Need::kOptional);
  }
};

// Actor reuse: the actor of (trial_id, attempt) becomes the actor of
// (new_trial_id, new_attempt) with `config`. Reply data {"reset": bool}.
struct Reset {
  uint64_t rid = 0;
  std::string trial_id;
  uint64_t attempt = 0;
  std::string new_trial_id;
  uint64_t new_attempt = 0;
  Json config;
  template <class V>
  void Visit(V& v) {
    v("rid", rid, Need::kRequired);
    v("trial_id", trial_id, Need::kRequired);
    v("attempt", attempt, Need::kRequired);
    v("new_trial_id", new_trial_id, Need::kRequired);
    v("new_attempt", new_attempt, Need::kRequired);
    v("config", config, Need::kOptional);
  }
};

// Stop and destroy the actor; if cleanup has not finished after `kill_after_ms`
// the worker abandons it and replies anyway (ok=false, error names the timeout).
struct Stop {
  uint64_t rid = 0;
  std::string trial_id;
  uint64_t attempt = 0;
  int64_t kill_after_ms = 600'000;
  template <class V>
  void Visit(V& v) {
    v("rid", rid, Need::kRequired);
    v("trial_id", trial_id, Need::kRequired);
    v("attempt", attempt, Need::kRequired);
    v("kill_after_ms", kill_after_ms, Need::kOptional);
  }
};

// Reply data: {"exports": {format: content}}.
struct Export {
  uint64_t rid = 0;
  std::string trial_id;
  uint64_t attempt = 0;
  std::vector<std::string> formats;
  template <class V>
  void Visit(V& v) {
    v("rid", rid, Need::kRequired);
    v("trial_id", trial_id, Need::kRequired);
    v("attempt", attempt, Need::kRequired);
    v("formats", formats, Need::kOptional);
  }
};

// Results of (trial_id, attempt) up to `seq` are durable; the worker may drop them.
struct AckEntry {
  std::string trial_id;
  uint64_t attempt = 0;
  uint64_t seq = 0;
  template <class V>
  void Visit(V& v) {
    v("trial_id", trial_id, Need::kRequired);
    v("attempt", attempt, Need::kRequired);
    v("seq", seq, Need::kRequired);
  }
};

// One commit's acknowledgements for one worker: its own entry and `more`
// (one message per worker and commit instead of one per actor: at one result
// per batch, an ACK per actor was every other message the head sent).
// `trains` (to a worker that announced kFeatureAckTrains; 0 to
// kMaxCoalesced): TRAINs that waited for this commit, handled after the
// acknowledgements as if each had come alone, in order. The head lets the
// TRAIN of a trial with long steps wait for the commit, so that the TRAIN and
// the ACK that each result brings back go as one message.
struct Ack {
  std::string trial_id;
  uint64_t attempt = 0;
  uint64_t seq = 0;
  std::vector<AckEntry> more;
  std::vector<Train> trains;
  template <class V>
  void Visit(V& v) {
    v("trial_id", trial_id, Need::kRequired);
    v("attempt", attempt, Need::kRequired);
    v("seq", seq, Need::kRequired);
    v("more", more, Need::kOptional);
    v("trains", trains, Need::kOptional);
  }
};

// Calls fn(const AckEntry&) for every acknowledgement of `ack`, its own first.
template <class F>
void ForEachAck(const Ack& ack, F&& fn) {
  fn(AckEntry{ack.trial_id, ack.attempt, ack.seq});
  for (const AckEntry& e : ack.more) fn(e);
}

// ---- both directions: large payloads (common/protocol/chunked_transfer.h) ----

// Bytes [offset, offset + payload size) of the payload announced by the
// header (REPLY or RESTORE) of request `rid` with `payload_bytes` > 0. The
// payload frame is required and never empty.
struct Chunk {
  uint64_t rid = 0;
  uint64_t offset = 0;
  template <class V>
  void Visit(V& v) {
    v("rid", rid, Need::kRequired);
    v("offset", offset, Need::kRequired);
  }
};

// Flow control: the receiver of request `rid`'s payload holds its first
// `received` bytes; the sender keeps at most a window beyond that in flight.
// `cancel`: the receiver refused the payload; the sender drops the transfer.
struct Credit {
  uint64_t rid = 0;
  uint64_t received = 0;
  bool cancel = false;
  template <class V>
  void Visit(V& v) {
    v("rid", rid, Need::kRequired);
    v("received", received, Need::kRequired);
    v("cancel", cancel, Need::kOptional);
  }
};

// ---- head -> worker: reads that need no actor ----

// Bytes of what a trial's attempt wrote to its `stream` ("stdout" or
// "stderr") on this worker: [offset, offset + n) of that attempt's section of
// the file (from its header line to the next attempt's header or the end),
// n <= min(limit, kMaxReadLogBytes). Answered by a REPLY with the bytes as its
// payload frame and data {"size": the section's bytes so far, "live": whether
// an actor of (trial_id, attempt) is hosted here, so the section may grow};
// refused: ok=false, data {"code": a status code name, e.g. "NotFound",
// "live"}. Served by the control thread from the files; the actor may be
// long gone.
struct ReadLog {
  uint64_t rid = 0;
  std::string trial_id;
  uint64_t attempt = 0;
  std::string stream = "stdout";
  uint64_t offset = 0;
  uint64_t limit = 0;
  template <class V>
  void Visit(V& v) {
    v("rid", rid, Need::kRequired);
    v("trial_id", trial_id, Need::kRequired);
    v("attempt", attempt, Need::kRequired);
    v("stream", stream, Need::kOptional);
    v("offset", offset, Need::kOptional);
    v("limit", limit, Need::kOptional);
  }
};
// A ReadLog answer stays below the size that would make it a chunked payload.
inline constexpr uint64_t kMaxReadLogBytes = 256 << 10;

// ---- submitted code (docs/protocol.md §9) ----

// The trainable name a worker started with --allow-submitted-code advertises,
// and CREATE_ACTOR names for a spec whose trainable is {"python": ...}. The
// '@' keeps it apart from configured names, which may not start with one.
inline constexpr char kSubmittedPythonTrainable[] = "@python";
// Code archives travel in pages of this size (the last may be shorter).
inline constexpr uint64_t kCodePageBytes = 1 << 20;

// Worker -> head: bytes [offset, offset + kCodePageBytes) of the code archive
// whose sha256 is `code`. One page in flight per archive; the worker asks for
// the next when a page arrives and asks again for the same page when none came
// within its resend interval (pages are idempotent). Answered by CODE.
struct FetchCode {
  std::string code;
  uint64_t offset = 0;
  template <class V>
  void Visit(V& v) {
    v("code", code, Need::kRequired);
    v("offset", offset, Need::kRequired);
  }
};

// Head -> worker: a page of archive `code` as the payload frame, with the
// archive's total `size`; or ok=false and `error` (unknown archive, a worker
// without --allow-submitted-code, a store error): the worker fails the actors
// waiting for it.
struct CodePage {
  std::string code;
  uint64_t offset = 0;
  uint64_t size = 0;
  bool ok = true;
  std::string error;
  template <class V>
  void Visit(V& v) {
    v("code", code, Need::kRequired);
    v("offset", offset, Need::kRequired);
    v("size", size, Need::kOptional);
    v("ok", ok, Need::kOptional);
    v("error", error, Need::kOptional);
  }
};

// ---- coalesced messages (sent only to a peer that announced the feature) ----

// Head -> worker (kFeatureTrains): the TRAINs of one turn for one worker's
// actors, each handled as if it had come alone, in order. At one result per
// TRAIN, a message per TRAIN was most of what the head sent.
struct Trains {
  std::vector<Train> trains;  // 1 to kMaxCoalesced
  template <class V>
  void Visit(V& v) {
    v("trains", trains, Need::kRequired);
  }
};

// Worker -> head (kFeatureResults): the RESULT batches one pass of the
// worker's loop produced, each handled as if it had come alone, in order.
struct Results {
  std::vector<ResultBatch> batches;  // 1 to kMaxCoalesced
  template <class V>
  void Visit(V& v) {
    v("batches", batches, Need::kRequired);
  }
};

// The variant order fixes the command byte (index + 1); append only.
using Body = std::variant<Register, Reply, ResultBatch, Heartbeat, Disconnect, Registered,
                          CreateActor, Train, Save, Restore, Reset, Stop, Export, Ack, Chunk,
                          Credit, ReadLog, FetchCode, CodePage, Trains, Results>;

// Commands addressed to an existing actor (by trial_id, attempt).
template <class T>
inline constexpr bool kIsActorCommand =
    std::is_same_v<T, Train> || std::is_same_v<T, Save> || std::is_same_v<T, Restore> ||
    std::is_same_v<T, Reset> || std::is_same_v<T, Stop> || std::is_same_v<T, Export>;

struct Message {
  Body body;
  std::string payload;  // optional raw frame (checkpoint bytes)
};

// Command name for logs ("REGISTER", "TRAIN", ...).
const char* CommandName(const Body& body);
const char* CommandNameByByte(uint8_t command);

}  // namespace ztune::protocol
