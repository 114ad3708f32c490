// PackDirectory / UnpackDirectory: a directory round-trips byte for byte,
// packs deterministically, and damaged or hostile archives are refused
// before anything is written.
#include "common/checkpoint/directory_archive.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "common/checkpoint/checkpoint_envelope.h"
#include "tests/fakes/temp_dir.h"

namespace ztune::checkpoint {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary);
  out << content;
}

std::string Read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Little-endian u32 at `at`.
void PutU32At(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// Re-seals a modified archive (a valid checksum over hostile content).
std::string Reseal(std::string body_with_old_crc) {
  body_with_old_crc.resize(body_with_old_crc.size() - 4);
  const uint32_t crc = Crc32(body_with_old_crc);
  body_with_old_crc.append(4, '\0');
  PutU32At(body_with_old_crc, body_with_old_crc.size() - 4, crc);
  return body_with_old_crc;
}

using testing::TempDir;

class DirectoryArchiveTest : public ::testing::Test {
 protected:
  fs::path src() const { return fs::path(dir_.path()) / "src"; }
  fs::path dst() const { return fs::path(dir_.path()) / "dst"; }
  void SetUp() override {
    Write(src() / "model.bin", std::string("\0\x01\x02binary\xff", 10));
    Write(src() / "sub" / "deeper" / "state.json", "{\"step\": 3}");
    Write(src() / "a.txt", "");
    fs::create_directories(src() / "empty");
    chmod((src() / "a.txt").c_str(), 0640);
    fs::create_directories(dst());
  }
  TempDir dir_;
};

TEST_F(DirectoryArchiveTest, RoundTripsFilesDirectoriesAndModes) {
  auto bytes = PackDirectory(src().string(), 1 << 20);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  ASSERT_TRUE(UnpackDirectory(*bytes, dst().string()).ok());
  EXPECT_EQ(Read(dst() / "model.bin"), std::string("\0\x01\x02binary\xff", 10));
  EXPECT_EQ(Read(dst() / "sub" / "deeper" / "state.json"), "{\"step\": 3}");
  EXPECT_TRUE(fs::is_regular_file(dst() / "a.txt"));
  EXPECT_EQ(fs::file_size(dst() / "a.txt"), 0u);
  EXPECT_TRUE(fs::is_directory(dst() / "empty"));
  struct stat st {};
  ASSERT_EQ(stat((dst() / "a.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST_F(DirectoryArchiveTest, PacksDeterministically) {
  auto a = PackDirectory(src().string(), 1 << 20);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(UnpackDirectory(*a, dst().string()).ok());
  auto b = PackDirectory(dst().string(), 1 << 20);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
}

TEST_F(DirectoryArchiveTest, AnEmptyDirectoryPacks) {
  fs::create_directories(fs::path(dir_.path()) / "none");
  auto bytes = PackDirectory((fs::path(dir_.path()) / "none").string(), 1 << 20);
  ASSERT_TRUE(bytes.ok());
  EXPECT_TRUE(UnpackDirectory(*bytes, dst().string()).ok());
  EXPECT_TRUE(fs::is_empty(dst()));
}

TEST_F(DirectoryArchiveTest, RefusesLinksAndOversizedDirectories) {
  fs::create_symlink("/etc/passwd", src() / "link");
  auto linked = PackDirectory(src().string(), 1 << 20);
  ASSERT_FALSE(linked.ok());
  EXPECT_EQ(linked.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(linked.status().message().find("link is a symbolic link"), std::string::npos)
      << linked.status().ToString();
  fs::remove(src() / "link");
  auto big = PackDirectory(src().string(), 64);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
}

TEST_F(DirectoryArchiveTest, EveryFlippedByteIsCaught) {
  auto bytes = PackDirectory(src().string(), 1 << 20);
  ASSERT_TRUE(bytes.ok());
  for (size_t i = 0; i < bytes->size(); ++i) {
    std::string damaged = *bytes;
    damaged[i] ^= 0x01;
    Status s = UnpackDirectory(damaged, dst().string());
    ASSERT_EQ(s.code(), StatusCode::kCorruption) << "byte " << i;
    ASSERT_TRUE(fs::is_empty(dst())) << "byte " << i;
  }
  for (size_t n : {size_t{0}, size_t{5}, bytes->size() - 1}) {
    EXPECT_EQ(UnpackDirectory(bytes->substr(0, n), dst().string()).code(), StatusCode::kCorruption);
  }
  EXPECT_EQ(UnpackDirectory(*bytes + "x", dst().string()).code(), StatusCode::kCorruption);
}

TEST_F(DirectoryArchiveTest, PathsThatLeaveTheDirectoryAreRefused) {
  // One file whose name has the length of the hostile paths below, so that
  // each can be swapped in place and the archive re-sealed.
  const fs::path one = fs::path(dir_.path()) / "one";
  Write(one / "abcdefgh", "x");
  auto bytes = PackDirectory(one.string(), 1 << 20);
  ASSERT_TRUE(bytes.ok());
  const size_t at = bytes->find("abcdefgh");
  ASSERT_NE(at, std::string::npos);
  for (const std::string hostile : {"../evil", "/etc/x1", "a/../..", "a//bbbb", "./aaaaa"}) {
    std::string h = hostile;
    h.resize(8, 'z');
    std::string damaged = *bytes;
    damaged.replace(at, 8, h);
    Status s = UnpackDirectory(Reseal(damaged), dst().string());
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << h;
    EXPECT_NE(s.message().find("leaves the directory"), std::string::npos) << s.ToString();
    EXPECT_TRUE(fs::is_empty(dst()));
  }
  EXPECT_FALSE(fs::exists(fs::path(dir_.path()) / "evil"));
}

TEST_F(DirectoryArchiveTest, TheTargetMustBeEmpty) {
  auto bytes = PackDirectory(src().string(), 1 << 20);
  ASSERT_TRUE(bytes.ok());
  Write(dst() / "stale", "x");
  EXPECT_EQ(UnpackDirectory(*bytes, dst().string()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ztune::checkpoint
