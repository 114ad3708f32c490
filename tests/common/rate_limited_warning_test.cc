#include "common/rate_limited_warning.h"

#include <memory>
#include <sstream>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

namespace ztune {
namespace {

// Routes spdlog's default logger into a string for the test's lifetime.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out_);
    sink->set_pattern("%v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string Take() {
    std::string s = out_.str();
    out_.str("");
    return s;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST(RateLimitedWarningTest, OneLinePerIntervalWithTheCountOfWhatWasSuppressed) {
  CapturedLog log;
  FakeClock clock;
  RateLimitedWarning w(clock, 1000);
  w.Warn("a");
  w.Warn("b");
  w.Warn("c");
  EXPECT_EQ(log.Take(), "a\n");
  clock.AdvanceMs(1000);
  w.Warn("d");
  EXPECT_EQ(log.Take(), "d (and 2 similar messages suppressed)\n");
}

TEST(PerPeerRateLimitedWarningTest, OnePeersFloodNeitherHidesNorCountsAgainstAnother) {
  CapturedLog log;
  FakeClock clock;
  PerPeerRateLimitedWarning w(clock, 1000);
  w.Warn("flooder", "flooder over budget");
  for (int i = 0; i < 50; ++i) w.Warn("flooder", "flooder over budget");
  w.Warn("other", "other over budget");
  EXPECT_EQ(log.Take(), "flooder over budget\nother over budget\n");
  clock.AdvanceMs(1000);
  w.Warn("other", "other over budget");
  w.Warn("flooder", "flooder over budget");
  EXPECT_EQ(log.Take(),
            "other over budget\n"
            "flooder over budget (and 50 more from the same peer suppressed)\n");
}

TEST(PerPeerRateLimitedWarningTest, ForgetsEveryoneBeyondItsBound) {
  CapturedLog log;
  FakeClock clock;
  PerPeerRateLimitedWarning w(clock, 1000, /*max_peers=*/2);
  w.Warn("a", "a");
  w.Warn("b", "b");
  w.Warn("c", "c");  // a and b forgotten
  w.Warn("a", "a again");
  w.Warn("c", "c again");  // still known: suppressed
  EXPECT_EQ(log.Take(), "a\nb\nc\na again\n");
}

}  // namespace
}  // namespace ztune
