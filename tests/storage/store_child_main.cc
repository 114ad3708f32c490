// storage_test_child: the second process of the storage tests (see
// child_process.h). Reports go to the file descriptor given as the last
// argument, one line each.
//
//   storage_test_child commit-loop <dir> <keys_per_batch> <report_fd>
//     Opens the store and commits batches 0, 1, 2, ... forever (until killed,
//     or 1,000,000 batches). Batch N puts keys "b<N>_<k>" (k < keys_per_batch,
//     alternating between the results and trials families) with values
//     "v<N>_<k>..." and meta "counter" = N, then, only after Commit returned,
//     reports "N".
//   storage_test_child hold <dir> <report_fd>
//     Opens the store, reports "ready", and keeps it open until killed.
//
// On any error: reports "error: <status>" and exits 2.
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "storage/rocksdb_store.h"

namespace {

using ztune::Status;
using ztune::storage::Family;
using ztune::storage::RocksDbStore;
using ztune::storage::WriteBatch;

void Report(int fd, const std::string& line) {
  const std::string out = line + "\n";
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::write(fd, out.data() + done, out.size() - done);
    if (n <= 0) std::_Exit(4);  // parent gone
    done += static_cast<size_t>(n);
  }
}

[[noreturn]] void Fail(int fd, const Status& s) {
  Report(fd, "error: " + s.ToString());
  std::_Exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return 64;
  const std::string mode = argv[1];
  const std::string dir = argv[2];
  const int fd = std::atoi(argv[argc - 1]);

  auto opened = RocksDbStore::Open(dir);
  if (!opened.ok()) Fail(fd, opened.status());
  std::unique_ptr<RocksDbStore> store = std::move(opened).value();

  if (mode == "hold") {
    Report(fd, "ready");
    while (true) ::pause();
  }
  if (mode != "commit-loop" || argc != 5) return 64;
  const int keys_per_batch = std::atoi(argv[3]);
  for (int n = 0; n < 1000000; ++n) {
    WriteBatch batch;
    for (int k = 0; k < keys_per_batch; ++k) {
      const std::string suffix = std::to_string(n) + "_" + std::to_string(k);
      batch.Put(k % 2 == 0 ? Family::kResults : Family::kTrials, "b" + suffix,
                "v" + suffix + std::string(100, '.'));
    }
    batch.Put(Family::kMeta, "counter", std::to_string(n));
    const Status s = store->Commit(batch);
    if (!s.ok()) Fail(fd, s);
    Report(fd, std::to_string(n));
  }
  return 0;
}
