// Submitted code at the head (docs/process-protocol.md "Submitted code"): the
// spec's {"python": "FILE:NAME"} + working_dir, the put_code uploads of
// CodeStore (paged, verified, stored once, bounded), who may upload, a submit
// that names code the head does not have or that no worker runs, the
// CREATE_ACTOR that carries entry and code, pages read back for workers, and
// `--check` of stored archives. Socket-free, fake clock, in-memory store.
#include <string>

#include <gtest/gtest.h>

#include "common/base64.h"
#include "common/protocol/messages.h"
#include "common/security/curve_keys.h"
#include "common/sha256.h"
#include "head/client_service.h"
#include "head/code_store.h"
#include "head/experiment_spec.h"
#include "head/store_check.h"
#include "storage/keys.h"
#include "tests/head/trial_runner_fixture.h"

namespace ztune::head {
namespace {

constexpr uint64_t kPage = protocol::kCodePageBytes;

// A project archive's bytes as far as the head cares: the magic, then bytes.
std::string FakeArchive(size_t size, char fill = 'x') {
  std::string bytes = "ZTDIR";
  bytes.resize(size, fill);
  for (size_t i = 5; i < size; ++i) bytes[i] = static_cast<char>((i * 131 + fill) & 0xff);
  return bytes;
}

Json PythonSpec(const std::string& hex, const std::string& entry = "train.py:train") {
  return Json{{"trainable", {{"python", entry}}},
              {"working_dir", "sha256:" + hex},
              {"num_samples", 2},
              {"stop", {{"training_iteration", 3}}}};
}

std::string Message(const Status& s) { return s.message(); }

// ---------------------------------------------------------------- the spec

TEST(SubmittedCodeSpecTest, ParsesTheEntryAndTheProjectAndWritesThemBack) {
  const std::string hex(64, 'a');
  auto spec = ExperimentSpec::Parse(PythonSpec(hex, "pkg/train.py:Outer.Inner"), 1);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->trainable, protocol::kSubmittedPythonTrainable);
  EXPECT_EQ(spec->python_entry, "pkg/train.py:Outer.Inner");
  EXPECT_EQ(spec->CodeHash(), hex);
  EXPECT_EQ(spec->name, "pkg/train.py:Outer.Inner");
  EXPECT_EQ(spec->TrainableLabel(), "python:pkg/train.py:Outer.Inner");
  // Placement: the actor goes only to workers that run submitted code.
  EXPECT_EQ(spec->resources.actor_trainable, protocol::kSubmittedPythonTrainable);
  // What is stored parses back to the same spec (a restarted head reads it).
  const Json stored = spec->ToJson();
  EXPECT_EQ(stored["trainable"], (Json{{"python", "pkg/train.py:Outer.Inner"}}));
  EXPECT_EQ(stored["working_dir"], "sha256:" + hex);
  auto again = ExperimentSpec::Parse(stored, 2);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->ToJson(), stored);
  // Different code or entry: actors are not interchangeable.
  auto other =
      ExperimentSpec::Parse(PythonSpec(std::string(64, 'b'), "pkg/train.py:Outer.Inner"), 1);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->TrainableKey(), spec->TrainableKey());
  // A named trainable has no working_dir in its stored form.
  auto named = ExperimentSpec::Parse(Json{{"trainable", "quadratic"}}, 1);
  ASSERT_TRUE(named.ok());
  EXPECT_FALSE(named->ToJson().contains("working_dir"));
}

TEST(SubmittedCodeSpecTest, RefusesBadEntriesAndProjects) {
  const std::string hex(64, 'c');
  struct Case {
    Json spec;
    std::string says;
  };
  const Case cases[] = {
      {PythonSpec(hex, "train.py"), "has no ':'"},
      {PythonSpec(hex, "train.txt:train"), "ending in \".py\""},
      {PythonSpec(hex, "/abs/train.py:train"), "relative"},
      {PythonSpec(hex, "../up/train.py:train"), "\"..\""},
      {PythonSpec(hex, "a//train.py:train"), "empty"},
      {PythonSpec(hex, "train.py:1abc"), "identifier"},
      {PythonSpec(hex, "train.py:a..b"), "identifier"},
      {PythonSpec(hex, "train.py:"), "identifier"},
      {PythonSpec(hex, "train.py:Outer.class"), "not a keyword"},
      {PythonSpec(hex, "train.py:tr\nain"), "control"},
      {PythonSpec("ABC"), "sha256:<64 lowercase hex digits>"},
      {PythonSpec(std::string(64, 'A')), "lowercase"},
      {Json{{"trainable", {{"python", "t.py:f"}}}}, "required with trainable.python"},
      {Json{{"trainable", "quadratic"}, {"working_dir", "sha256:" + hex}}, "only submitted code"},
      {Json{{"trainable", "@python"}}, "reserved"},
      {Json{{"trainable", {{"python", "t.py:f"}, {"pip", "x"}}}, {"working_dir", "sha256:" + hex}},
       "unknown key 'pip'"},
      {Json{{"trainable", {{"python", 5}}}, {"working_dir", "sha256:" + hex}}, "FILE:NAME"},
      {Json{{"trainable", 5}}, "required"},
  };
  for (const auto& c : cases) {
    auto spec = ExperimentSpec::Parse(c.spec, 1);
    ASSERT_FALSE(spec.ok()) << c.spec.dump();
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(Message(spec.status()).find(c.says), std::string::npos)
        << c.spec.dump() << " -> " << spec.status().ToString();
  }
}

// ---------------------------------------------------------------- CodeStore

class CodeStoreTest : public ::testing::Test {
 protected:
  CodeStoreTest() { Reopen(); }

  void Reopen(CodeStoreOptions options = {1ull << 22, 3ull << 22, 60'000}) {
    options_ = options;
    code_ = std::make_unique<CodeStore>(store_, batch_, clock_, options);
  }
  void Commit() {
    ASSERT_TRUE(store_.Commit(batch_).ok());
    batch_.Clear();
  }
  // Uploads `bytes` page by page; the reply of the last page.
  Result<Json> Upload(const std::string& bytes, const std::string& hex) {
    Result<Json> r = code_->Put(hex, bytes.size(), 0, {});
    while (r.ok() && !(*r)["stored"].get<bool>()) {
      const uint64_t at = (*r)["next_offset"].get<uint64_t>();
      r = code_->Put(hex, bytes.size(), at, std::string_view(bytes).substr(at, kPage));
    }
    return r;
  }

  storage::InMemoryStore store_;
  storage::WriteBatch batch_;
  FakeClock clock_;
  CodeStoreOptions options_;
  std::unique_ptr<CodeStore> code_;
};

TEST_F(CodeStoreTest, StoresAVerifiedArchiveOnceAndServesItsPages) {
  const std::string bytes = FakeArchive(2 * kPage + 1234);
  const std::string hex = Sha256Hex(bytes);
  auto probe = code_->Put(hex, bytes.size(), 0, {});
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  EXPECT_FALSE((*probe)["stored"].get<bool>());
  EXPECT_EQ((*probe)["next_offset"], 0);
  auto last = Upload(bytes, hex);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_TRUE((*last)["stored"].get<bool>());
  EXPECT_TRUE((*last)["next_offset"].is_null());
  EXPECT_EQ(code_->uploads_in_progress(), 0u);
  // Readable in the turn that stored it, and after the commit.
  EXPECT_TRUE(code_->Has(hex).value());
  Commit();
  EXPECT_TRUE(code_->Has(hex).value());
  std::string read;
  for (uint64_t at = 0; at < bytes.size(); at += kPage) {
    auto page = code_->ReadPage(hex, at);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    EXPECT_EQ(page->size, bytes.size());
    read += page->bytes;
  }
  EXPECT_EQ(read, bytes);
  // Stored once: a second upload is answered "stored" at its probe and writes nothing.
  auto again = code_->Put(hex, bytes.size(), 0, {});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)["stored"].get<bool>());
  EXPECT_TRUE(batch_.empty());
  // A page that is not one, an unknown archive.
  EXPECT_EQ(code_->ReadPage(hex, 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(code_->ReadPage(hex, 3 * kPage).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(code_->ReadPage(std::string(64, 'f'), 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(code_->ReadPage("nothex", 0).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CodeStoreTest, RefusesWhatIsNotTheNamedArchiveAndKeepsNothing) {
  const std::string bytes = FakeArchive(kPage + 10);
  const std::string hex = Sha256Hex(bytes);
  // Bytes whose digest is another: refused at the last page, nothing stored.
  const std::string wrong = std::string(64, '0');
  auto r = Upload(bytes, wrong);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("sha256 " + hex), std::string::npos) << r.status().ToString();
  EXPECT_TRUE(batch_.empty());
  EXPECT_EQ(code_->uploads_in_progress(), 0u);
  // Not a project archive (no magic), though its address is right.
  const std::string junk(100, 'j');
  r = Upload(junk, Sha256Hex(junk));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a project archive"), std::string::npos);
  EXPECT_TRUE(batch_.empty());
  // Over the limit: refused at the probe, naming the flag.
  r = code_->Put(hex, options_.max_code_bytes + 1, 0, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("--max-code-bytes"), std::string::npos);
  // A page over 1 MiB, data past the size, a bad address, an empty archive.
  EXPECT_EQ(code_->Put(hex, 3 * kPage, 0, std::string(kPage + 1, 'x')).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code_->Put(hex, 10, 5, std::string(6, 'x')).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code_->Put("ABC", 10, 0, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(code_->Put(hex, 0, 0, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(batch_.empty());
  EXPECT_FALSE(code_->Has(hex).value());
}

TEST_F(CodeStoreTest, APageAtTheWrongOffsetSaysWhereTheUploadStands) {
  const std::string bytes = FakeArchive(2 * kPage + 5);
  const std::string hex = Sha256Hex(bytes);
  // Data before any probe at a later offset: no upload is in progress.
  auto r = code_->Put(hex, bytes.size(), kPage, std::string_view(bytes).substr(kPage, kPage));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(code_->Put(hex, bytes.size(), 0, std::string_view(bytes).substr(0, kPage)).ok());
  // The same page again (a resend) and a skipped page are both refused.
  for (uint64_t at : {uint64_t{0}, 2 * kPage}) {
    r = code_->Put(hex, bytes.size(), at, std::string_view(bytes).substr(at, kPage));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(r.status().message().find("goes on at offset " + std::to_string(kPage)),
              std::string::npos)
        << r.status().ToString();
  }
  // A probe says where to go on; the upload then completes.
  r = code_->Put(hex, bytes.size(), 0, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)["next_offset"], kPage);
  ASSERT_TRUE(Upload(bytes, hex).ok());
  EXPECT_TRUE(code_->Has(hex).value());
}

TEST_F(CodeStoreTest, UploadsInProgressAreBoundedAndIdleOnesMakeRoom) {
  // Room for three uploads of the largest archive (4 MiB each, 12 MiB).
  std::vector<std::string> hexes;
  for (int i = 0; i < 3; ++i) {
    hexes.push_back(Sha256Hex(FakeArchive(options_.max_code_bytes, static_cast<char>('a' + i))));
    ASSERT_TRUE(code_->Put(hexes.back(), options_.max_code_bytes, 0, {}).ok());
  }
  const std::string fourth = Sha256Hex(FakeArchive(kPage, 'z'));
  auto r = code_->Put(fourth, kPage, 0, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("retry"), std::string::npos);
  // One keeps going; the others fall idle past upload_idle_ms and give way.
  clock_.AdvanceMs(options_.upload_idle_ms / 2);
  const std::string first = FakeArchive(options_.max_code_bytes, 'a');
  ASSERT_TRUE(code_->Put(hexes[0], first.size(), 0, std::string_view(first).substr(0, kPage)).ok());
  clock_.AdvanceMs(options_.upload_idle_ms / 2);
  ASSERT_TRUE(code_->Put(fourth, kPage, 0, {}).ok());
  EXPECT_EQ(code_->uploads_in_progress(), 2u);  // the active one and the new one
  r = code_->Put(hexes[0], first.size(), kPage, std::string_view(first).substr(kPage, kPage));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  r = code_->Put(hexes[1], options_.max_code_bytes, kPage, "x");
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);  // dropped: start again
}

TEST_F(CodeStoreTest, CheckCountsArchivesAndFindsDamage) {
  const std::string bytes = FakeArchive(kPage + 77);
  const std::string hex = Sha256Hex(bytes);
  ASSERT_TRUE(Upload(bytes, hex).ok());
  Commit();
  auto report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << report->ToText();
  EXPECT_EQ(report->code_archives, 1);
  EXPECT_EQ(report->code_bytes, static_cast<int64_t>(bytes.size()));
  // A flipped byte in a page: another sha256.
  storage::WriteBatch damage;
  std::string page1 = bytes.substr(kPage);
  page1[3] ^= 1;
  damage.Put(storage::Family::kMeta, storage::CodePageKey(hex, 1), page1);
  ASSERT_TRUE(store_.Commit(damage).ok());
  report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  ASSERT_FALSE(report->ok());
  EXPECT_NE(report->ToText().find("is damaged"), std::string::npos) << report->ToText();
  // Served to a worker? The page is the right size, so the worker's own
  // sha256 check is what catches it; a missing page is caught here.
  damage.Clear();
  damage.Delete(storage::Family::kMeta, storage::CodePageKey(hex, 1));
  ASSERT_TRUE(store_.Commit(damage).ok());
  EXPECT_EQ(code_->ReadPage(hex, kPage).status().code(), StatusCode::kCorruption);
  report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  EXPECT_NE(report->ToText().find("lacks page 1"), std::string::npos) << report->ToText();
}

// ---------------------------------------------------------------- through the runner

std::string NewKey() {
  auto pair = security::GenerateKeyPair();
  EXPECT_TRUE(pair.ok());
  return pair.ok() ? pair->public_key.z85() : std::string();
}

class SubmittedCodeRunnerTest : public TrialRunnerTest {
 protected:
  Json Call(const Json& request, const ClientCaller& caller) {
    ClientService clients(*runner_);
    return clients.Handle(request, caller);
  }
  // put_code pages of `bytes` as `caller`: the last reply.
  Json UploadAs(const std::string& bytes, const ClientCaller& caller) {
    const std::string hex = Sha256Hex(bytes);
    Json reply = Call(
        Json{{"op", "put_code"}, {"code", hex}, {"size", bytes.size()}, {"offset", 0}}, caller);
    while (reply.value("ok", false) && !reply.value("stored", true)) {
      const uint64_t at = reply["next_offset"].get<uint64_t>();
      reply = Call(Json{{"op", "put_code"},
                        {"code", hex},
                        {"size", bytes.size()},
                        {"offset", at},
                        {"data", Base64Encode(std::string_view(bytes).substr(at, kPage))}},
                   caller);
    }
    return reply;
  }

  const ClientCaller reader_{NewKey(), "reader", ClientRole::kRead};
  const ClientCaller alice_{NewKey(), "alice", ClientRole::kSubmit};
};

TEST_F(SubmittedCodeRunnerTest, AReadClientMayNotUploadAndTheHeadKeepsNothing) {
  const std::string bytes = FakeArchive(1000);
  Json reply = UploadAs(bytes, reader_);
  EXPECT_FALSE(reply.value("ok", true));
  EXPECT_EQ(reply["error"].value("code", ""), "PermissionDenied") << reply.dump();
  EXPECT_NE(reply["error"].value("message", "").find("needs role submit"), std::string::npos);
  Commit();
  EXPECT_FALSE(runner_->code().Has(Sha256Hex(bytes)).value());
  EXPECT_EQ(runner_->code().uploads_in_progress(), 0u);
}

TEST_F(SubmittedCodeRunnerTest, ASubmitNeedsTheCodeStoredAndAWorkerThatRunsIt) {
  fleet_->Register("plain", 2);  // no @python
  const std::string bytes = FakeArchive(3000);
  const std::string hex = Sha256Hex(bytes);
  Json spec = PythonSpec(hex);
  // Not uploaded yet.
  Json reply = Call(Json{{"op", "submit"}, {"spec", spec}}, alice_);
  EXPECT_EQ(reply["error"].value("code", ""), "FailedPrecondition") << reply.dump();
  EXPECT_NE(reply["error"].value("message", "").find("--working-dir"), std::string::npos);
  // Uploaded (a bad base64 page first: refused, nothing changes).
  Json bad =
      Call(Json{{"op", "put_code"}, {"code", hex}, {"size", 3000}, {"offset", 0}, {"data", "!!!"}},
           alice_);
  EXPECT_EQ(bad["error"].value("code", ""), "InvalidArgument") << bad.dump();
  reply = UploadAs(bytes, alice_);
  ASSERT_TRUE(reply.value("ok", false)) << reply.dump();
  Commit();
  // No worker runs submitted code: refused, saying how to start one.
  reply = Call(Json{{"op", "submit"}, {"spec", spec}}, alice_);
  EXPECT_EQ(reply["error"].value("code", ""), "InvalidArgument") << reply.dump();
  EXPECT_NE(reply["error"].value("message", "").find("--allow-submitted-code"), std::string::npos);
  EXPECT_NE(reply["error"].value("message", "").find("quadratic"), std::string::npos);
  // A worker that runs it: accepted, and its actors carry entry and code.
  fleet_->Register("opted-in", 2, 0, {protocol::kSubmittedPythonTrainable});
  reply = Call(Json{{"op", "submit"}, {"spec", spec}}, alice_);
  ASSERT_TRUE(reply.value("ok", false)) << reply.dump();
  const std::string exp = reply["experiment_id"].get<std::string>();
  Commit();
  runner_->Tick();
  Commit();
  int creates = 0;
  for (const auto& sent : sink_.sent) {
    if (const auto* c = std::get_if<protocol::CreateActor>(&sent.message.body)) {
      ++creates;
      EXPECT_EQ(sent.worker_id, WorkerId("opted-in"));
      EXPECT_EQ(c->trainable, protocol::kSubmittedPythonTrainable);
      EXPECT_EQ(c->entry, "train.py:train");
      EXPECT_EQ(c->code, hex);
    }
  }
  EXPECT_EQ(creates, 2);
  RunToEnd(exp);
  EXPECT_EQ(CountStatus(exp, TrialStatus::kTerminated), 2);
  // The stored experiment and the code survive a head restart.
  CrashHead();
  const Experiment* e = runner_->FindExperiment(exp);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->spec.CodeHash(), hex);
  EXPECT_TRUE(runner_->code().Has(hex).value());
  auto report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << report->ToText();
  EXPECT_EQ(report->code_archives, 1);
}

}  // namespace
}  // namespace ztune::head
