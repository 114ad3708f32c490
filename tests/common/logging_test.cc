// The log sink escapes every record's text: a peer's bytes never reach a log
// file raw, and one record stays one line.
#include "common/logging.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>
#include <string>

namespace ztune {
namespace {

TEST(LoggingTest, RecordsAreEscapedBeforeTheSink) {
  std::ostringstream out;
  auto inner = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  spdlog::logger logger("test", MakeEscapingSink(inner));
  logger.set_pattern("[%l] %v");
  const std::string worker_name("w\xff\x01\nforged line", 15);
  logger.warn("worker '{}' sent a malformed frame", worker_name);
  logger.info("plain {}", 42);
  logger.flush();
  EXPECT_EQ(out.str(),
            "[warning] worker 'w\\xff\\x01\\nforged line' sent a malformed frame\n"
            "[info] plain 42\n");
}

}  // namespace
}  // namespace ztune
