// Files kept open for appending: every append reaches the file at once, the
// open files stay within the capacity, and a failure names the file.
#include "head/append_file_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace ztune::head {
namespace {

namespace fs = std::filesystem;

std::string Read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t OpenFds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

class AppendFileCacheTest : public ::testing::Test {
 protected:
  AppendFileCacheTest()
      : root_(fs::temp_directory_path() / ("ztune_append_files_" + std::to_string(::getpid()))) {
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  ~AppendFileCacheTest() override { fs::remove_all(root_); }

  std::string File(int i) const { return (root_ / ("f" + std::to_string(i))).string(); }

  fs::path root_;
};

TEST_F(AppendFileCacheTest, AppendsReachTheFileAtOnceAndOpenFilesStayWithinTheCapacity) {
  const size_t fds_before = OpenFds();
  {
    AppendFileCache files(3);
    // Round robin over five files through three slots: every append after
    // the first three reopens an evicted file and must go on at its end.
    for (int round = 0; round < 4; ++round) {
      for (int i = 0; i < 5; ++i) {
        ASSERT_TRUE(files.Append(File(i), "r" + std::to_string(round) + "\n").ok());
        EXPECT_EQ(Read(File(i)).size(), 3u * (round + 1)) << "not buffered in user space";
        EXPECT_LE(files.open_files(), 3u);
      }
    }
    EXPECT_EQ(files.open_files(), 3u);
    EXPECT_EQ(OpenFds(), fds_before + 3);
    ASSERT_TRUE(files.Append(File(0), "").ok());
  }
  EXPECT_EQ(OpenFds(), fds_before) << "closed with the cache";
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Read(File(i)), "r0\nr1\nr2\nr3\n") << File(i);
  EXPECT_EQ((fs::status(File(0)).permissions() & fs::perms::all),
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::others_read);
}

TEST_F(AppendFileCacheTest, TheMostRecentlyUsedFileStaysOpen) {
  AppendFileCache files(2);
  ASSERT_TRUE(files.Append(File(0), "a").ok());
  ASSERT_TRUE(files.Append(File(1), "a").ok());
  ASSERT_TRUE(files.Append(File(0), "b").ok());  // 0 used last: 1 is evicted next
  ASSERT_TRUE(files.Append(File(2), "a").ok());
  // File 0 is still open: appends go to its inode even after a rename.
  fs::rename(File(0), File(9));
  ASSERT_TRUE(files.Append(File(0), "c").ok());
  EXPECT_EQ(Read(File(9)), "abc");
  EXPECT_FALSE(fs::exists(File(0)));
}

TEST_F(AppendFileCacheTest, AFailureNamesTheFileAndLeavesNothingOpen) {
  AppendFileCache files(4);
  const std::string missing = (root_ / "no-such-dir" / "result.json").string();
  Status s = files.Append(missing, "x");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find("cannot open " + missing + ": No such file or directory"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(files.open_files(), 0u);
  // A write that fails (a full device): the file is closed, and the next
  // append opens it again.
  if (fs::exists("/dev/full")) {
    s = files.Append("/dev/full", "x");
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("cannot append to /dev/full: No space left on device"),
              std::string::npos)
        << s.message();
    EXPECT_EQ(files.open_files(), 0u);
  }
  fs::create_directories(root_ / "no-such-dir");
  ASSERT_TRUE(files.Append(missing, "x").ok());
  EXPECT_EQ(Read(missing), "x");
}

}  // namespace
}  // namespace ztune::head
