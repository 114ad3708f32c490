// Copies a trainable process's stdout and stderr into the files `stdout` and
// `stderr` of the trial it currently serves, and keeps the last lines of
// stderr for error messages.
//
// Why pipes and a copying thread rather than handing the child the files: an
// actor reused for another trial (reset) keeps its process, and that trial's
// files must hold only its own output. Only the worker can switch files under
// a running process.
//
// Thread affinity: one pump thread reads and writes; SwitchTo, Header,
// StderrTail and Stop are called from the actor's runner thread. Reads and
// writes happen under one mutex, so SwitchTo sees no byte in limbo: what the
// child wrote before SwitchTo (the SDK flushes before each reply) lands in
// the old files, what it writes after in the new ones.
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace ztune::worker {

class TrialOutput {
 public:
  // Takes ownership of the two read ends (non-blocking). `dir` is the trial's
  // directory; the files are opened for appending and get `header`, the
  // header line of `attempt`, before any byte of the child's.
  TrialOutput(int stdout_fd, int stderr_fd, const std::string& dir, uint64_t attempt,
              std::string_view header);
  ~TrialOutput();  // Stop()
  TrialOutput(const TrialOutput&) = delete;
  TrialOutput& operator=(const TrialOutput&) = delete;

  // Copies what is readable now to the current files, then writes into
  // `dir`'s files from here on, starting with `header`, the header line of
  // `attempt` (actor reuse: the files of another trial).
  void SwitchTo(const std::string& dir, uint64_t attempt, std::string_view header);
  // Back to the files of `dir`, whose attempt's part goes on (a declined
  // reset): no header.
  void ReturnTo(const std::string& dir);
  // Copies what is readable now to the current files (before quoting the
  // stderr tail of a child that just died).
  void Flush();
  // The last lines of stderr (at most 20 lines and 4 KiB), joined by '\n'.
  std::string StderrTail() const;
  // Copies what is left (until both pipes report end of file or nothing is
  // readable), then ends the thread and closes the files. Idempotent.
  void Stop();

 private:
  void Run();
  // Under mu_: reads every byte available now from `fd` into `file`; false at
  // end of file or on an error (the fd is then closed and set to -1).
  bool DrainLocked(int& fd, std::FILE* file, bool is_stderr);
  bool& MidLineLocked(std::FILE* file) { return file == out_ ? out_mid_line_ : err_mid_line_; }
  void OpenLocked(const std::string& dir);
  // Drains the pipes into the current files, then opens `dir`'s.
  void SwitchLocked(const std::string& dir);
  // Writes `line` (plus '\n'), the header of `attempt`, to both files, and
  // records where it starts in the directory's output index
  // (trial_output_index.h), so that `ztune logs` finds each attempt's part.
  void HeaderLocked(uint64_t attempt, std::string_view line);
  void CloseFilesLocked();
  void RememberStderrLocked(std::string_view bytes);

  mutable std::mutex mu_;
  int stdout_fd_ = -1;            // GUARDED_BY(mu_)
  int stderr_fd_ = -1;            // GUARDED_BY(mu_)
  std::FILE* out_ = nullptr;      // GUARDED_BY(mu_)
  std::FILE* err_ = nullptr;      // GUARDED_BY(mu_)
  std::string dir_;               // GUARDED_BY(mu_): the files' directory
  // Whether the file's last byte is not a '\n' (output cut mid-line, a
  // progress bar): a header then starts on a new line. GUARDED_BY(mu_)
  bool out_mid_line_ = false;
  bool err_mid_line_ = false;
  std::deque<std::string> tail_;  // GUARDED_BY(mu_): complete stderr lines
  std::string partial_;           // GUARDED_BY(mu_): stderr after the last '\n'
  int wake_[2] = {-1, -1};        // Stop() writes to wake_[1]
  std::thread thread_;
  bool stopped_ = false;  // runner thread only
};

}  // namespace ztune::worker
