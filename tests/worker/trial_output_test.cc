// TrialOutput's per-attempt sections and ReadOutputSection, the worker half
// of `ztune logs`: real pipes, real files in a temp directory.
#include "worker/trial_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "worker/trial_output_index.h"

namespace ztune::worker {
namespace {

namespace fs = std::filesystem;

class TrialOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("ztune-trial-output-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    NewPipes();
  }
  // The child's stdout and stderr; TrialOutput takes (and closes) the
  // non-blocking read ends.
  void NewPipes() {
    ASSERT_EQ(pipe2(out_, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(err_, O_CLOEXEC), 0);
    ASSERT_EQ(fcntl(out_[0], F_SETFL, O_NONBLOCK), 0);
    ASSERT_EQ(fcntl(err_[0], F_SETFL, O_NONBLOCK), 0);
  }
  void TearDown() override {
    for (int fd : {out_[1], err_[1]}) {
      if (fd >= 0) close(fd);
    }
    fs::remove_all(root_);
  }

  std::string Dir(const std::string& trial) const { return (root_ / trial).string(); }
  void Out(const std::string& s) {
    ASSERT_EQ(write(out_[1], s.data(), s.size()), ssize_t(s.size()));
  }
  void Err(const std::string& s) {
    ASSERT_EQ(write(err_[1], s.data(), s.size()), ssize_t(s.size()));
  }
  std::unique_ptr<TrialOutput> Open(const std::string& dir, uint64_t attempt,
                                    const std::string& header) {
    return std::make_unique<TrialOutput>(out_[0], err_[0], dir, attempt, header);
  }
  // Ends the child's side and copies what is left.
  void Finish(TrialOutput& output) {
    close(out_[1]);
    close(err_[1]);
    out_[1] = err_[1] = -1;
    output.Stop();
  }
  static std::string Section(const std::string& dir, const std::string& stream, uint64_t attempt) {
    auto slice = ReadOutputSection(dir, stream, attempt, 0, 1 << 20);
    EXPECT_TRUE(slice.ok()) << slice.status().ToString();
    if (!slice.ok()) return "";
    EXPECT_EQ(slice->size, slice->bytes.size());
    return slice->bytes;
  }
  static std::string File(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  fs::path root_;
  int out_[2] = {-1, -1};
  int err_[2] = {-1, -1};
};

TEST_F(TrialOutputTest, EachAttemptReadsBackOnlyItsOwnPart) {
  const std::string dir = Dir("t1");
  {
    auto output = Open(dir, 1, "==== attempt 1 ====");
    Out("one\n");
    Err("warn one\n");
    output->Flush();
    Finish(*output);
  }
  // A retry appends to the same files.
  NewPipes();
  {
    auto output = Open(dir, 2, "==== attempt 2 ====");
    Out("two, cut mid-line");
    Finish(*output);
  }
  EXPECT_EQ(Section(dir, "stdout", 1), "==== attempt 1 ====\none\n");
  EXPECT_EQ(Section(dir, "stderr", 1), "==== attempt 1 ====\nwarn one\n");
  EXPECT_EQ(Section(dir, "stdout", 2), "==== attempt 2 ====\ntwo, cut mid-line");
  EXPECT_EQ(Section(dir, "stderr", 2), "==== attempt 2 ====\n");
  // The files keep the whole history.
  EXPECT_EQ(File(dir + "/stdout"),
            "==== attempt 1 ====\none\n==== attempt 2 ====\ntwo, cut mid-line");
}

TEST_F(TrialOutputTest, AReusedActorsOutputGoesToTheNewTrialFromItsHeaderOn) {
  const std::string a = Dir("a");
  const std::string b = Dir("b");
  auto output = Open(a, 1, "==== a 1 ====");
  Out("for a\n");
  output->SwitchTo(b, 3, "==== b 3 ====");
  Out("for b\n");
  Finish(*output);
  EXPECT_EQ(Section(a, "stdout", 1), "==== a 1 ====\nfor a\n");
  EXPECT_EQ(Section(b, "stdout", 3), "==== b 3 ====\nfor b\n");
  auto missing = ReadOutputSection(a, "stdout", 3, 0, 100);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("attempts there: 1"), std::string::npos)
      << missing.status().message();
}

TEST_F(TrialOutputTest, ADeclinedResetReturnsWithoutAHeaderAndTheSectionGoesOn) {
  const std::string a = Dir("a");
  const std::string b = Dir("b");
  auto output = Open(a, 1, "==== a 1 ====");
  Out("before\n");
  output->SwitchTo(b, 1, "==== b 1 ====");
  output->ReturnTo(a);
  Out("after\n");
  Finish(*output);
  EXPECT_EQ(Section(a, "stdout", 1), "==== a 1 ====\nbefore\nafter\n");
}

TEST_F(TrialOutputTest, PagesCoverTheSectionExactly) {
  const std::string dir = Dir("t");
  auto output = Open(dir, 1, "h");
  std::string body;
  for (int i = 0; i < 1000; ++i) body += "line " + std::to_string(i) + "\n";
  Out(body);
  Finish(*output);
  const std::string whole = "h\n" + body;
  std::string read;
  uint64_t offset = 0;
  while (true) {
    auto slice = ReadOutputSection(dir, "stdout", 1, offset, 777);
    ASSERT_TRUE(slice.ok()) << slice.status().ToString();
    EXPECT_EQ(slice->size, whole.size());
    EXPECT_LE(slice->bytes.size(), 777u);
    if (slice->bytes.empty()) break;
    read += slice->bytes;
    offset += slice->bytes.size();
  }
  EXPECT_EQ(read, whole);
  // Past the end: nothing, and the size.
  auto past = ReadOutputSection(dir, "stdout", 1, whole.size() + 10, 100);
  ASSERT_TRUE(past.ok());
  EXPECT_TRUE(past->bytes.empty());
}

TEST(OutputIndexTest, BadRequestsAreRefusedWithWhatIsThere) {
  const fs::path dir =
      fs::temp_directory_path() / ("ztune-output-index-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  EXPECT_EQ(ReadOutputSection(dir.string(), "stdin", 1, 0, 10).status().code(),
            StatusCode::kInvalidArgument);
  auto none = ReadOutputSection(dir.string(), "stdout", 1, 0, 10);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("no stdout file"), std::string::npos);
  // A torn last index line (a crash mid-write) is skipped, not misread.
  std::ofstream(dir / "stdout") << "x\ny\n";
  std::ofstream(dir / kOutputIndexFile) << "1 0 0\n2 2";
  auto one = ReadOutputSection(dir.string(), "stdout", 1, 0, 10);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->bytes, "x\ny\n");
  EXPECT_EQ(ReadOutputSection(dir.string(), "stdout", 2, 0, 10).status().code(),
            StatusCode::kNotFound);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ztune::worker
