// Submitted code on the worker (docs/process-protocol.md "Submitted code"):
// CodeCache fetches an archive page by page, checks its sha256, resends what
// went unanswered and unpacks once for every actor; a worker started without
// --allow-submitted-code neither advertises nor runs it; one started with it
// fetches a project it never saw from the (fake) head and runs its Python
// function as a trial.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/checkpoint/directory_archive.h"
#include "common/sha256.h"
#include "tests/worker/actor_harness.h"
#include "tests/worker/fake_head.h"
#include "tests/worker/running_worker.h"
#include "worker/code_cache.h"

namespace ztune::worker {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using namespace protocol;

constexpr uint64_t kPage = kCodePageBytes;

// tests/worker/fixtures -> the repository root.
std::string RepoRoot() {
  return fs::path(ZTUNE_TEST_FIXTURES).parent_path().parent_path().parent_path().string();
}

void WriteFile(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// A project: a function trainable importing a module of its own package, and
// a data file of `data_bytes` (so that the archive spans several pages).
std::string PackProjectAt(const std::string& dir, size_t data_bytes) {
  WriteFile(dir + "/train.py",
            "import ztune\n"
            "from lib.helper import increment\n"
            "def train(config):\n"
            "    value = 0\n"
            "    while True:\n"
            "        value += increment(config)\n"
            "        ztune.report({'value': value})\n");
  WriteFile(dir + "/lib/__init__.py", "");
  WriteFile(dir + "/lib/helper.py",
            "def increment(config):\n    return config.get('increment', 1)\n");
  std::string data(data_bytes, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 7919) >> 3);
  WriteFile(dir + "/data/blob.bin", data);
  auto packed = checkpoint::PackDirectory(dir, 1ull << 30);
  EXPECT_TRUE(packed.ok()) << packed.status().ToString();
  return packed.ok() ? *packed : std::string();
}

CodePage PageOf(const std::string& archive, const std::string& hex, uint64_t offset,
                std::string* bytes) {
  *bytes = archive.substr(offset, kPage);
  return CodePage{hex, offset, archive.size(), true, ""};
}

// ---------------------------------------------------------------- CodeCache

class CodeCacheTest : public ::testing::Test {
 protected:
  std::string Root() const { return dir_.path() + "/cache"; }

  // Feeds pages as the head would, answering each request the cache makes.
  void Serve(CodeCache& cache, const std::string& archive, const std::string& hex, TimeMs now = 0) {
    auto requests = cache.DueRequests(now, 1000);
    ASSERT_EQ(requests.size(), 1u);
    std::optional<FetchCode> next = requests[0];
    while (next.has_value()) {
      ASSERT_EQ(next->code, hex);
      std::string bytes;
      const CodePage page = PageOf(archive, hex, next->offset, &bytes);
      next = cache.OnPage(page, bytes, now);
    }
  }

  TempDir dir_;
  TempDir project_;
};

TEST_F(CodeCacheTest, FetchesPageByPageChecksAndUnpacksOnceForEveryActor) {
  const std::string archive = PackProjectAt(project_.path(), 2 * kPage + 100);
  ASSERT_GT(archive.size(), 2 * kPage);
  const std::string hex = Sha256Hex(archive);
  CodeCache cache(Root());
  cache.Want(hex);
  cache.Want(hex);  // wanted twice: one fetch
  EXPECT_EQ(cache.fetching(), 1u);
  std::vector<FetchCode> requests = cache.DueRequests(0, 1000);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].offset, 0u);
  EXPECT_TRUE(cache.DueRequests(500, 1000).empty());  // in flight, not yet overdue
  // A lost request is asked for again after resend_ms, at the same offset.
  requests = cache.DueRequests(1000, 1000);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].offset, 0u);
  // (PageOf fills `bytes` before OnPage reads it: argument order is unspecified.)
  std::string bytes;
  CodePage page = PageOf(archive, hex, 0, &bytes);
  auto next = cache.OnPage(page, bytes, 1000);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->offset, kPage);
  // The second answer to the resent request: ignored.
  page = PageOf(archive, hex, 0, &bytes);
  EXPECT_FALSE(cache.OnPage(page, bytes, 1001).has_value());
  // Two actors wait meanwhile; one unpacks, both get the directory.
  std::atomic<bool> stop{false};
  Result<std::string> a = Status::Internal("not run"), b = Status::Internal("not run");
  std::thread ta([&] { a = cache.Await(hex, &stop); });
  std::thread tb([&] { b = cache.Await(hex, &stop); });
  while (next.has_value()) {
    page = PageOf(archive, hex, next->offset, &bytes);
    next = cache.OnPage(page, bytes, 1002);
  }
  ta.join();
  tb.join();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(*a, cache.DirOf(hex));
  EXPECT_EQ(*b, *a);
  EXPECT_TRUE(fs::is_regular_file(*a + "/lib/helper.py"));
  EXPECT_EQ(fs::file_size(*a + "/data/blob.bin"), 2 * kPage + 100);
  EXPECT_EQ(cache.fetching(), 0u);
  // Only the directory stays (no .part, no .zar, no unpack leftovers).
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(Root())) names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{hex});
  // A restarted worker finds it: nothing to fetch.
  CodeCache again(Root());
  again.Want(hex);
  EXPECT_TRUE(again.DueRequests(0, 1000).empty());
  auto dir = again.Await(hex, &stop);
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(*dir, *a);
}

TEST_F(CodeCacheTest, BytesOfAnotherSha256AreNotUsedAndAFailedFetchStartsAgain) {
  const std::string archive = PackProjectAt(project_.path(), 10);
  const std::string hex = Sha256Hex(archive);
  std::string tampered = archive;
  tampered[tampered.size() / 2] ^= 1;
  CodeCache cache(Root());
  cache.Want(hex);
  Serve(cache, tampered, hex);
  std::atomic<bool> stop{false};
  auto dir = cache.Await(hex, &stop);
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(dir.status().message().find("have sha256 " + Sha256Hex(tampered)), std::string::npos)
      << dir.status().ToString();
  EXPECT_FALSE(fs::exists(cache.DirOf(hex)));
  EXPECT_TRUE(fs::is_empty(Root()));  // the .part is gone
  // The next actor wants it again: a new fetch, which this time succeeds.
  cache.Want(hex);
  Serve(cache, archive, hex);
  dir = cache.Await(hex, &stop);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_TRUE(fs::is_regular_file(*dir + "/train.py"));
}

TEST_F(CodeCacheTest, TheHeadsRefusalAndAnAbandonedActorEndTheWait) {
  const std::string hex(64, 'e');
  CodeCache cache(Root());
  cache.Want(hex);
  ASSERT_EQ(cache.DueRequests(0, 1000).size(), 1u);
  // Abandoned while waiting.
  std::atomic<bool> stop{true};
  auto dir = cache.Await(hex, &stop);
  EXPECT_EQ(dir.status().code(), StatusCode::kAborted);
  // Refused by the head: the waiter hears the head's words.
  EXPECT_FALSE(
      cache.OnPage(CodePage{hex, 0, 0, false, "code sha256:eee is not in the store"}, "", 1)
          .has_value());
  stop = false;
  dir = cache.Await(hex, &stop);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("the head refused it: code sha256:eee is not in the store"),
            std::string::npos)
      << dir.status().ToString();
  // Pages of the wrong size, a size that changes: the fetch fails, saying so.
  cache.Want(hex);
  ASSERT_EQ(cache.DueRequests(2, 1000).size(), 1u);
  auto next = cache.OnPage(CodePage{hex, 0, 3 * kPage, true, ""}, std::string(kPage, 'x'), 3);
  ASSERT_TRUE(next.has_value());
  EXPECT_FALSE(cache.OnPage(CodePage{hex, kPage, 4 * kPage, true, ""}, std::string(kPage, 'x'), 4)
                   .has_value());
  dir = cache.Await(hex, &stop);
  EXPECT_NE(dir.status().message().find("size changed"), std::string::npos)
      << dir.status().ToString();
  cache.Want(hex);
  ASSERT_EQ(cache.DueRequests(5, 1000).size(), 1u);
  EXPECT_FALSE(cache.OnPage(CodePage{hex, 0, 10, true, ""}, "short", 6).has_value());
  dir = cache.Await(hex, &stop);
  EXPECT_NE(dir.status().message().find("has 5 bytes, not 10"), std::string::npos)
      << dir.status().ToString();
}

TEST_F(CodeCacheTest, ABadArchiveUnderTheRightAddressFailsTheSetupClearly) {
  // A submit client can upload bytes that hash right but do not unpack.
  const std::string junk = "ZTDIR not really an archive";
  const std::string hex = Sha256Hex(junk);
  CodeCache cache(Root());
  cache.Want(hex);
  Serve(cache, junk, hex);
  std::atomic<bool> stop{false};
  auto dir = cache.Await(hex, &stop);
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), StatusCode::kCorruption) << dir.status().ToString();
  EXPECT_NE(dir.status().message().find("cannot unpack code sha256:" + hex), std::string::npos);
  EXPECT_TRUE(fs::is_empty(Root()));
}

TEST_F(CodeCacheTest, LeftoversOfAnInterruptedFetchOrUnpackAreRemovedAtStart) {
  const std::string hex(64, '1');
  WriteFile(Root() + "/" + hex + ".part", "half");
  WriteFile(Root() + "/" + hex + ".unpack-3/x.py", "half");
  WriteFile(Root() + "/" + std::string(64, '2') + "/train.py", "kept");
  CodeCache cache(Root());
  EXPECT_FALSE(fs::exists(Root() + "/" + hex + ".part"));
  EXPECT_FALSE(fs::exists(Root() + "/" + hex + ".unpack-3"));
  EXPECT_TRUE(fs::exists(Root() + "/" + std::string(64, '2') + "/train.py"));
}

// ---------------------------------------------------------------- the worker

constexpr int64_t kHeartbeatMs = 50;

class SubmittedCodeWorkerTest : public ::testing::Test {
 protected:
  void Start(bool allow) {
    head_ = std::make_unique<FakeHead>(context_, kHeartbeatMs, 10);
    WorkerOptions o = head_->WorkerOptionsFor(dir_.path());
    o.allow_submitted_code = allow;
    o.python = "/usr/bin/python3";
    o.python_path = RepoRoot() + "/python";
    o.submitted_code_stop_grace_ms = 500;
    worker_ = std::make_unique<RunningWorker>(context_, o);
    auto reg = head_->WaitFor<Register>();
    ASSERT_TRUE(reg.has_value());
    register_ = *reg;
  }
  void TearDown() override {
    worker_.reset();
    head_.reset();
  }

  zmq::context_t context_{1};
  TempDir dir_;
  TempDir project_;
  std::unique_ptr<FakeHead> head_;
  std::unique_ptr<RunningWorker> worker_;
  Register register_;
};

TEST_F(SubmittedCodeWorkerTest, WithoutTheOptInItNeitherAdvertisesNorRunsIt) {
  Start(/*allow=*/false);
  EXPECT_EQ(std::count(register_.trainables.begin(), register_.trainables.end(),
                       kSubmittedPythonTrainable),
            0);
  CreateActor create{1,
                     "t",
                     1,
                     kSubmittedPythonTrainable,
                     Json::object(),
                     {{"CPU", 1}},
                     {},
                     "train.py:train",
                     std::string(64, 'a')};
  head_->Send(create);
  auto r = head_->WaitReply(1);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ok);
  EXPECT_NE(r->error.find("does not run submitted code"), std::string::npos) << r->error;
  EXPECT_NE(r->error.find("--allow-submitted-code"), std::string::npos) << r->error;
  // It asked the head for nothing and unpacked nothing.
  head_->Pump(milliseconds(3 * kHeartbeatMs));
  for (const auto& m : head_->others) EXPECT_FALSE(std::holds_alternative<FetchCode>(m.body));
  EXPECT_FALSE(fs::exists(dir_.path() + "/.ztune-code"));
}

TEST_F(SubmittedCodeWorkerTest, FetchesAProjectItNeverSawAndRunsItsFunction) {
  Start(/*allow=*/true);
  EXPECT_EQ(std::count(register_.trainables.begin(), register_.trainables.end(),
                       kSubmittedPythonTrainable),
            1);
  const std::string archive = PackProjectAt(project_.path(), kPage + 5000);
  const std::string hex = Sha256Hex(archive);
  CreateActor create{1,
                     "t",
                     1,
                     kSubmittedPythonTrainable,
                     Json{{"increment", 3}},
                     {{"CPU", 1}},
                     {},
                     "train.py:train",
                     hex};
  head_->Send(create);
  head_->Send(Train{2, "t", 1, 3, 10.0});
  // The pipelined TRAIN waits behind the setup, which waits for the code.
  std::set<uint64_t> asked;
  std::optional<Reply> created;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!created && std::chrono::steady_clock::now() < deadline) {
    auto m = head_->Recv(milliseconds(20));
    if (!m) continue;
    if (auto* f = std::get_if<FetchCode>(&m->body)) {
      EXPECT_EQ(f->code, hex);
      asked.insert(f->offset);
      std::string bytes;
      const CodePage page = PageOf(archive, hex, f->offset, &bytes);
      head_->Send(page, bytes);
    } else if (auto* r = std::get_if<Reply>(&m->body); r && r->rid == 1) {
      created = *r;
    } else {
      head_->others.push_back(std::move(*m));
    }
  }
  ASSERT_TRUE(created.has_value()) << "no reply to the CREATE_ACTOR";
  ASSERT_TRUE(created->ok) << created->error;
  EXPECT_EQ(asked, (std::set<uint64_t>{0, kPage}));
  auto batch = head_->WaitBatch(2, std::chrono::seconds(20));
  ASSERT_TRUE(batch.has_value());
  ASSERT_FALSE(batch->failed) << batch->error;
  ASSERT_EQ(batch->results.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(batch->results[i].result.ToJson()["value"], 3 * (i + 1));
  EXPECT_TRUE(fs::is_regular_file(dir_.path() + "/.ztune-code/" + hex + "/lib/helper.py"));
  // A second actor of the same project starts without a fetch.
  create.rid = 3;
  create.trial_id = "u";
  head_->Send(create);
  bool fetched_again = false;
  std::optional<Reply> second;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!second && std::chrono::steady_clock::now() < until) {
    auto m = head_->Recv(milliseconds(20));
    if (!m) continue;
    if (std::holds_alternative<FetchCode>(m->body)) fetched_again = true;
    if (auto* r = std::get_if<Reply>(&m->body); r && r->rid == 3) second = *r;
  }
  ASSERT_TRUE(second.has_value());
  EXPECT_TRUE(second->ok) << second->error;
  EXPECT_FALSE(fetched_again);
  head_->Send(Stop{4, "t", 1, 5000});
  head_->Send(Stop{5, "u", 1, 5000});
  std::set<uint64_t> stopped;
  const auto stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (stopped.size() < 2 && std::chrono::steady_clock::now() < stop_deadline) {
    auto m = head_->Recv(milliseconds(20));
    if (auto* r = m ? std::get_if<Reply>(&m->body) : nullptr; r && (r->rid == 4 || r->rid == 5)) {
      EXPECT_TRUE(r->ok) << r->error;
      stopped.insert(r->rid);
    }
  }
  EXPECT_EQ(stopped, (std::set<uint64_t>{4, 5}));
}

}  // namespace
}  // namespace ztune::worker
