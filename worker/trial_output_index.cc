#include "worker/trial_output_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace ztune::worker {
namespace {

struct IndexLine {
  uint64_t attempt = 0;
  uint64_t offset[2] = {0, 0};  // stdout, stderr
};

// Unparsable lines (a write cut short by a crash) are skipped: an index
// line is written whole before the header it points at.
std::vector<IndexLine> ReadIndex(const std::string& dir) {
  std::vector<IndexLine> lines;
  std::ifstream in(dir + "/" + kOutputIndexFile);
  std::string text;
  while (std::getline(in, text)) {
    std::istringstream fields(text);
    IndexLine l;
    if (fields >> l.attempt >> l.offset[0] >> l.offset[1]) lines.push_back(l);
  }
  return lines;
}

std::string AttemptList(const std::vector<IndexLine>& lines) {
  if (lines.empty()) return "none";
  std::string out;
  for (const IndexLine& l : lines) {
    if (!out.empty()) out += ", ";
    out += std::to_string(l.attempt);
  }
  return out;
}

}  // namespace

Status AppendOutputIndex(const std::string& dir, uint64_t attempt, uint64_t stdout_offset,
                         uint64_t stderr_offset) {
  const std::string path = dir + "/" + kOutputIndexFile;
  std::FILE* f = std::fopen(path.c_str(), "ae");
  if (f == nullptr) return Status::IOError("cannot open " + path + ": " + std::strerror(errno));
  const int n = std::fprintf(f, "%llu %llu %llu\n", static_cast<unsigned long long>(attempt),
                             static_cast<unsigned long long>(stdout_offset),
                             static_cast<unsigned long long>(stderr_offset));
  const bool closed = std::fclose(f) == 0;
  if (n < 0 || !closed)
    return Status::IOError("cannot write " + path + ": " + std::strerror(errno));
  return Status::Ok();
}

Result<OutputSlice> ReadOutputSection(const std::string& dir, const std::string& stream,
                                      uint64_t attempt, uint64_t offset, uint64_t limit) {
  if (stream != "stdout" && stream != "stderr") {
    return Status::InvalidArgument("unknown output stream '" + stream +
                                   "' (there are stdout and stderr)");
  }
  const int which = stream == "stdout" ? 0 : 1;
  const std::string path = dir + "/" + stream;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("no " + stream + " file (" + path + ")");
    return Status::IOError("cannot open " + path + ": " + std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  // The size first, the index after: an attempt whose header is being
  // written now then counts as not there yet rather than as ending early.
  struct stat st {};
  if (fstat(fd, &st) != 0)
    return Status::IOError("cannot stat " + path + ": " + std::strerror(errno));
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  const std::vector<IndexLine> lines = ReadIndex(dir);
  auto it = std::find_if(lines.begin(), lines.end(),
                         [&](const IndexLine& l) { return l.attempt == attempt; });
  if (it == lines.end()) {
    return Status::NotFound("no output of attempt " + std::to_string(attempt) + " in " + path +
                            " (attempts there: " + AttemptList(lines) + ")");
  }
  const uint64_t begin = std::min(it->offset[which], file_size);
  uint64_t end = file_size;
  if (std::next(it) != lines.end())
    end = std::clamp(std::next(it)->offset[which], begin, file_size);
  OutputSlice slice;
  slice.size = end - begin;
  if (offset >= slice.size) return slice;
  const uint64_t n = std::min(limit, slice.size - offset);
  slice.bytes.resize(n);
  uint64_t got = 0;
  while (got < n) {
    const ssize_t r =
        pread(fd, slice.bytes.data() + got, n - got, static_cast<off_t>(begin + offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::IOError("cannot read " + path + ": " + std::strerror(errno));
    if (r == 0) break;  // truncated under us
    got += static_cast<uint64_t>(r);
  }
  slice.bytes.resize(got);
  return slice;
}

}  // namespace ztune::worker
